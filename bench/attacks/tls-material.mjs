// TLS material for the admission attacks and the TLS tests (test/security, test/admission): a CA
// and certificates made with openssl in a temporary directory. No dependency on the library, so
// tests that run from source import it too.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A CA and a certificate it signed for each of `names`; each of `selfSigned` gets a certificate
 * signed by itself (one no node trusts). files(n) gives the paths of n's key, certificate and the
 * CA's certificate, buffers(n) their contents (node:tls options); remove() deletes them all.
 * @param {string[]} names
 * @param {{ selfSigned?: string[] }} [opts]
 */
export function tlsMaterial(names, { selfSigned = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rds-tls-'));
  const ssl = (...a) => execFileSync('openssl', a, { cwd: dir, stdio: 'ignore' });
  /** A self-signed certificate for `cn` (the CA's, or an untrusted node's). */
  const selfSign = (cn, file) =>
    ssl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '2',
      '-subj',
      `/CN=${cn}`,
      '-keyout',
      `${file}.key`,
      '-out',
      `${file}.pem`,
    );
  selfSign('rds-ca', 'ca');
  for (const n of names) {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${n}`, '-keyout', `${n}.key`, '-out', `${n}.csr`);
    ssl(
      'x509',
      '-req',
      '-in',
      `${n}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-out',
      `${n}.pem`,
    );
  }
  for (const n of selfSigned) selfSign(n, n);
  const files = (n) => ({ key: join(dir, `${n}.key`), cert: join(dir, `${n}.pem`), ca: join(dir, 'ca.pem') });
  /** @returns {{ key: Buffer, cert: Buffer, ca: Buffer }} */
  const buffers = (n) => Object.fromEntries(Object.entries(files(n)).map(([k, f]) => [k, readFileSync(f)]));
  return { dir, files, buffers, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
