// MONITOR on a plain TCP connection: every command a redis-server runs, parsed from the lines
// it streams. A client library's monitor mode is not used: it switches into monitor mode only
// after handling MONITOR's "+OK", so a command echoed in the same read as that "+OK" is taken
// for a reply nobody asked for (ioredis then fails with "Command queue state error"), and its
// reconnect logic keeps a failed test's process alive. This connection never reconnects.
import net from "node:net";

/**
 * Starts MONITOR on the server at `host:port`; resolves once the server has confirmed it, so
 * every command sent after that is seen. `onCommand(args, source)` is called for each command:
 * `args` the command and its arguments as strings, `source` the client's address, or "lua"
 * for a call a script made. `stop()` closes the connection; `unparsed` lists the lines that were
 * not a command (an error from the server, say), so a count built on `onCommand` can check that
 * it missed nothing.
 */
export function monitorServer({ host = "127.0.0.1", port }, onCommand) {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    let confirmed = false;
    let pending = "";
    const unparsed = [];
    const stop = () => socket.destroy();
    socket.setEncoding("latin1"); // the server escapes every byte that is not printable ASCII
    socket.on("connect", () => socket.write("MONITOR\r\n"));
    socket.on("error", (error) => {
      if (!confirmed) reject(error);
    });
    socket.on("close", () => {
      if (!confirmed) reject(new Error(`MONITOR on ${host}:${port}: the connection closed first`));
    });
    socket.on("data", (chunk) => {
      pending += chunk;
      let end;
      while ((end = pending.indexOf("\r\n")) !== -1) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!confirmed) {
          if (line !== "+OK") {
            stop();
            reject(new Error(`MONITOR on ${host}:${port} answered ${JSON.stringify(line)}`));
            return;
          }
          confirmed = true;
          resolve({ stop, unparsed });
          continue;
        }
        const parsed = parseMonitorLine(line);
        if (parsed) onCommand(parsed.args, parsed.source);
        else unparsed.push(line);
      }
    });
  });
}

const ESCAPES = { n: "\n", r: "\r", t: "\t", a: "\x07", b: "\b", '"': '"', "\\": "\\" };

/**
 * One MONITOR line, `+<time> [<db> <source>] "<arg>" "<arg>" …`, as `{ args, source }`; null
 * for anything else. Arguments are quoted with backslash escapes (`\"`, `\\`, `\n`, `\xHH`…).
 */
export function parseMonitorLine(line) {
  // The source may itself contain "]" (an IPv6 address, "[::1]:5000"); the arguments follow.
  const header = /^\+\d+\.\d+ \[\d+ (.+?)\] (?=")/.exec(line);
  if (header === null) return null;
  const args = [];
  let at = header[0].length;
  while (at < line.length) {
    if (line[at] !== '"') return null;
    let arg = "";
    at++;
    for (;;) {
      if (at >= line.length) return null;
      const c = line[at++];
      if (c === '"') break;
      if (c !== "\\") {
        arg += c;
        continue;
      }
      const e = line[at++];
      if (e === "x") {
        arg += String.fromCharCode(parseInt(line.slice(at, at + 2), 16));
        at += 2;
      } else if (e in ESCAPES) {
        arg += ESCAPES[e];
      } else {
        return null;
      }
    }
    args.push(arg);
    if (line[at] === " ") at++;
  }
  return { args, source: header[1] };
}
