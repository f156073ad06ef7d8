// The engine worker with a storage fault (storage-faults.js, evaluated first) — the test's `workerUrl`.
import './storage-faults.js';
import '/dist/clef-worker.js';
