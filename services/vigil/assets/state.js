// What the page last read from the API, and references into what it has drawn.

export const state = {
  jobId: null,
  job: null,
  overview: null,
  tms: null,
  checkpoints: null,
  okAt: 0,               // Date.now() of the last successful poll
  everOk: false,
  failing: false,
  failure: '',
  serverOffset: 0,       // server clock − browser clock, from job.now
  uptimeBase: null,      // [uptime-ms, Date.now() when read]
  spark: new Map(),      // stage -> records in/s samples
  graphKey: '',
  graph: null,           // refs into the SVG, rebuilt when the topology changes
  stageOrder: [],
  rows: new Map(),       // stage -> table row refs
  tmRows: new Map(),     // taskmanager id -> row refs
  lostTms: new Set(),
};

export const serverNow = () => Date.now() + state.serverOffset;
