# The Maven flags that build Ktor release `r` of ktor-releases.tsv, as the runner gives them
# (runner/src/ktor_lab/versions.py, Release.maven_flags; a unit test keeps the two equal):
#   awk -v r=3.4.1 -f proxy-app/maven-flags.awk ktor-releases.tsv
# Its Kotlin, -Dno.<engine>=true for each engine of the list it lacks (=false for the others), and
# its properties. Exit 1 with the known releases when `r` is not in the list, and with the reason
# when it builds the clients only (lab.modules=clients: no ktor-server-netty served, so no proxy).
!/^#/ && NF >= 4 {
    order[++n] = $1
    line[$1] = $0
    split($3, es, ",")
    for (i in es) all_engines[es[i]] = 1
}
END {
    if (!(r in line)) {
        known = ""
        for (i = 1; i <= n; i++) known = known order[i] " "
        print "KTOR_VERSION=" r " is not in ktor-releases.tsv (known: " known ")" > "/dev/stderr"
        exit 1
    }
    split(line[r], f)
    if (index("," f[4] ",", ",lab.modules=clients,")) {
        print "KTOR_VERSION=" r " builds the clients only (its ktor-bom and ktor-server-netty are not served): no proxy image; name a release with the proxy" > "/dev/stderr"
        exit 1
    }
    out = "-Dktor.version=" f[1] " -Dkotlin.version=" f[2]
    has = "," f[3] ","
    for (e in all_engines) out = out " -Dno." e "=" (index(has, "," e ",") ? "false" : "true")
    split(f[4], ps, ",")
    for (i in ps) out = out " -D" ps[i]
    print out
}
