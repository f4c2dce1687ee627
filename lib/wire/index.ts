export * from './header.js';
export * from './extensions.js';
export * from './frame-reader.js';
export * from './ib-private-data.js';
export * from './rdma-ext.js';
