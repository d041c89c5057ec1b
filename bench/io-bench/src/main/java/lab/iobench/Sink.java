package lab.iobench;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;

/**
 * The receiving end of the socket benchmarks, on a loopback port: reads an 8-byte length,
 * then that many bytes into a 64 KiB buffer, then answers one byte. Both writers (Ktor's and
 * java.net.Socket) talk to it the same way, so each measures the full delivery.
 */
public final class Sink implements AutoCloseable {
    private final ServerSocket server;
    private final Thread thread;

    public Sink() throws IOException {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        thread = new Thread(this::serve, "sink");
        thread.setDaemon(true);
        thread.start();
    }

    public int port() {
        return server.getLocalPort();
    }

    private void serve() {
        byte[] buffer = new byte[64 * 1024];
        while (!server.isClosed()) {
            try (Socket socket = server.accept()) {
                InputStream in = socket.getInputStream();
                long left = new DataInputStream(in).readLong();
                while (left > 0) {
                    int n = in.read(buffer, 0, (int) Math.min(buffer.length, left));
                    if (n < 0) throw new IOException("the writer closed " + left + " bytes early");
                    left -= n;
                }
                socket.getOutputStream().write(1);
            } catch (IOException e) {
                if (!server.isClosed()) e.printStackTrace();
            }
        }
    }

    @Override
    public void close() throws IOException {
        server.close();
    }
}
