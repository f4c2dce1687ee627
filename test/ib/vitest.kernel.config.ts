import { defineConfig } from 'vitest/config';

// Runs inside the peer guest of test/ib/run.sh: rds-socket against the kernel's RDS/IB in the other guest.
export default defineConfig({
  test: {
    include: [
      'test/ib/kernel-ib.test.ts',
      'test/ib/kernel-rdma.test.ts',
      'test/ib/kernel-tos.test.ts',
      'test/ib/kernel-stress.test.ts',
    ],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    pool: 'forks',
  },
});
