// njs handlers of the lab's upstream. Written for njs 0.7.9 (Debian bookworm) and the
// newer njs of the official nginx image: only APIs both have.
import fs from 'fs';
import crypto from 'crypto';

const MAX_DELAY_MS = 120000;
const CHUNK = 1 << 20;

function delay(r) {
    let ms = 2000;
    if (r.args.ms !== undefined) {
        ms = parseInt(r.args.ms, 10);
        if (!(ms >= 0)) {
            r.return(400, 'ms must be a non-negative integer\n');
            return;
        }
    }
    ms = Math.min(ms, MAX_DELAY_MS);
    setTimeout(() => {
        r.headersOut['Content-Type'] = 'text/plain';
        r.return(200, `delayed ${ms} ms\n`);
    }, ms);
}

// Hashes the request body from nginx's temp file in 1 MiB reads, so a 100 MB upload
// never sits in memory whole.
function upload(r) {
    if (r.method !== 'PUT' && r.method !== 'POST') {
        r.headersOut['Allow'] = 'PUT, POST';
        r.return(405, 'use PUT or POST\n');
        return;
    }
    const hash = crypto.createHash('sha256');
    let bytes = 0;
    const path = r.variables.request_body_file;
    if (path) {
        const fd = fs.openSync(path, 'r');
        try {
            const buf = Buffer.alloc(CHUNK);
            for (;;) {
                const n = fs.readSync(fd, buf, 0, CHUNK, bytes);
                if (n <= 0) break;
                hash.update(n === CHUNK ? buf : buf.slice(0, n));
                bytes += n;
            }
        } finally {
            fs.closeSync(fd);
        }
    } else if (r.requestBuffer) {
        hash.update(r.requestBuffer);
        bytes = r.requestBuffer.length;
    }
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify({ bytes: bytes, sha256: hash.digest('hex') }) + '\n');
}

function echo(r) {
    const headers = [];
    for (const name in r.headersIn) {
        headers.push([name, r.headersIn[name]]);
    }
    const raw = r.rawHeadersIn ? r.rawHeadersIn : headers;
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify({
        method: r.method,
        uri: r.variables.request_uri,
        headers: raw,
        body_bytes: r.requestBuffer ? r.requestBuffer.length : 0,
    }) + '\n');
}

function status(r) {
    const code = parseInt(r.variables.code, 10);
    r.headersOut['Content-Type'] = 'text/plain';
    r.return(code, `status ${code}\n`);
}

export default { delay, upload, echo, status };
