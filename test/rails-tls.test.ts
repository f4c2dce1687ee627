import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoopTransport, RdsStack, TcpTransport } from '../lib/index.js';
import { tlsMaterial } from '../bench/attacks/tls-material.mjs';
import { TEST_TCP_PORT } from './helpers.js';

// Rails are not carried over TLS (issue 33: addRail() on a TLS stack was accepted and the rail
// never came up, rail_refused counting forever): a TLS stack refuses them at the call.
describe('rails on a TLS stack', () => {
  let pki: ReturnType<typeof tlsMaterial>;
  beforeAll(() => {
    pki = tlsMaterial(['a']);
  });
  afterAll(() => pki.remove());
  const rail = { peer: '127.133.200.2', local: '127.133.201.1', remote: '127.133.201.2' };
  const tlsTransports = () => [new TcpTransport({ tls: pki.buffers('a') }), new LoopTransport()];

  it('addRail() refuses with EOPNOTSUPP, saying why and what to do; nothing is declared', async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT, transports: tlsTransports() });
    try {
      await expect(stack.addRail(rail)).rejects.toMatchObject({
        code: 'EOPNOTSUPP',
        message: expect.stringMatching(/TLS.*declare no rails on a TLS stack/s),
      });
      expect(stack.listRails()).toEqual([]);
      expect(stack.counters.get('rail_refused')).toBe(0);
    } finally {
      await stack.close();
    }
  });

  it('the rails option of a TLS stack is refused when the stack is made', () => {
    expect(() => new RdsStack({ tcpPort: TEST_TCP_PORT, transports: tlsTransports(), rails: [rail] })).toThrow(
      expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/TLS/) }),
    );
  });

  it('a stack without TLS still declares it', async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    try {
      await stack.addRail(rail);
      expect(stack.listRails()).toEqual([rail]);
    } finally {
      await stack.close();
    }
  });
});
