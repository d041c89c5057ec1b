package lab.iobench;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.*;

/**
 * The file half of the I/O study: one 128 MiB file (in the page cache after the first read)
 * read to its end through Ktor's File.readChannel() and through a FileInputStream, in the
 * same chunk size.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"-Xmx512m"})
public class FileReadBenchmark {
    @Param({"134217728"})
    public long size;

    @Param({"8192"})
    public int chunk;

    private File file;
    private byte[] buffer;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        file = File.createTempFile("io-bench", ".bin");
        file.deleteOnExit();
        byte[] block = new byte[1 << 20];
        for (int i = 0; i < block.length; i++) block[i] = (byte) i;
        try (OutputStream out = Files.newOutputStream(file.toPath())) {
            for (long left = size; left > 0; left -= block.length) {
                out.write(block, 0, (int) Math.min(block.length, left));
            }
        }
        buffer = new byte[chunk];
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        file.delete();
    }

    @Benchmark
    public long ktorFileChannel() throws IOException {
        long n = KtorIo.readFile(file, buffer);
        if (n != size) throw new IOException("read " + n + " of " + size + " bytes");
        return n;
    }

    @Benchmark
    public long javaFileInputStream() throws IOException {
        long total = 0;
        try (InputStream in = new FileInputStream(file)) {
            int n;
            while ((n = in.read(buffer)) != -1) total += n;
        }
        if (total != size) throw new IOException("read " + total + " of " + size + " bytes");
        return total;
    }
}
