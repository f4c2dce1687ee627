export { FaultProxy, type FaultProxyOptions, type CutKind, type Direction } from './fault-proxy.js';
