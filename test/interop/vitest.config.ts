import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/interop/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 300_000,
    fileParallelism: false,
    pool: 'forks',
  },
});
