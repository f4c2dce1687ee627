import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Runs `node examples/<file> [args]` from the package root as a user would (importing the built
 * package by its name), with RDS_SOCKET_NODE=none so a host node running on this machine does not
 * take the example's sockets; resolves with the exit code and everything it printed, and kills it
 * (rejecting with what it printed) if it runs past `ms`.
 */
export function runExample(file: string, args: string[], ms: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [`examples/${file}`, ...args], {
      cwd: ROOT,
      env: { ...process.env, RDS_SOCKET_NODE: 'none' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (out += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`examples/${file} did not finish in ${ms} ms:\n${out}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, out });
    });
  });
}
