// What a bench peer prints on its stdout: one JSON object a line. jsonLines() collects them and
// returns next(pred, ms): the first line (received so far or later) that `pred` accepts, or a
// rejection "<what>: no answer" after `ms` (default `defaultMs`).
export function jsonLines(stdout, what, defaultMs = 60000) {
  const lines = [];
  const waiters = [];
  let buf = '';
  stdout.setEncoding('utf8');
  stdout.on('data', (d) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, nl)));
      buf = buf.slice(nl + 1);
      waiters.splice(0).forEach((w) => w());
    }
  });
  return (pred, ms = defaultMs) =>
    new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`${what}: no answer`)), ms);
      const check = () => {
        const l = lines.find(pred);
        if (l) {
          clearTimeout(t);
          resolve(l);
        } else waiters.push(check);
      };
      check();
    });
}
