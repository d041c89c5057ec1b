// compose-config renders Compose files into their effective configuration, as JSON, with
// compose-go, the loader `docker compose` itself uses. It is the lab's `docker compose config`
// where no Docker is installed: the tests render every overlay with it and check the result.
//
//	compose-config [-profile P]... [-env-file F] -f docker-compose.yml [-f overlay.yml]...
//
// Paths are relative to the directory of the first file, as in `docker compose`. Interpolation
// reads the process environment and the env file (default: .env beside the first file).
// Invalid files, unknown keys or a required variable left unset: a message on stderr, exit 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var files, profiles list
	var envFile, project string
	flag.Var(&files, "f", "a Compose file; repeat to stack overlays in order")
	flag.Var(&profiles, "profile", "a profile to enable; repeat for more")
	flag.StringVar(&envFile, "env-file", "", "the env file (default: .env beside the first file)")
	flag.StringVar(&project, "project-name", "ktor-lab", "the project name")
	flag.Parse()
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "compose-config: give at least one -f FILE")
		os.Exit(2)
	}
	workdir := filepath.Dir(files[0])
	if envFile == "" {
		envFile = filepath.Join(workdir, ".env")
	}
	options, err := cli.NewProjectOptions(
		files,
		cli.WithName(project),
		cli.WithWorkingDirectory(workdir),
		cli.WithOsEnv,
		cli.WithEnvFiles(envFile),
		cli.WithDotEnv,
		cli.WithProfiles(profiles),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		fail(err)
	}
	loaded, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := loaded.MarshalJSON()
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
	os.Stdout.WriteString("\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compose-config:", err)
	os.Exit(1)
}
