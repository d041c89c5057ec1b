package lab.iobench;

import io.ktor.network.selector.SelectorManager;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.*;

/**
 * The socket study: 128 MiB written to a loopback sink through Ktor's socket API and through
 * java.net.Socket, in the same chunk size, each until the sink acknowledged every byte.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"-Xmx512m"})
public class SocketWriteBenchmark {
    @Param({"134217728"})
    public long size;

    @Param({"8192"})
    public int chunk;

    private Sink sink;
    private SelectorManager selector;
    private byte[] buffer;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        sink = new Sink();
        selector = KtorIo.selector();
        buffer = new byte[chunk];
        for (int i = 0; i < chunk; i++) buffer[i] = (byte) i;
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        selector.close();
        sink.close();
    }

    @Benchmark
    public long ktorSocket() {
        return KtorIo.writeSocket(selector, sink.port(), size, buffer);
    }

    @Benchmark
    public long javaSocket() throws IOException {
        try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), sink.port())) {
            OutputStream out = socket.getOutputStream();
            InputStream in = socket.getInputStream();
            new DataOutputStream(out).writeLong(size);
            long left = size;
            while (left > 0) {
                int n = (int) Math.min(buffer.length, left);
                out.write(buffer, 0, n);
                left -= n;
            }
            out.flush();
            if (in.read() != 1) throw new IOException("no acknowledgement from the sink");
            return size;
        }
    }
}
