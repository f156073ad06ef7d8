// Storage faults for the engine worker, chosen by the worker URL's `?fault=` (see storage-worker.js);
// also run in the page by storage.test.mjs (addInitScript) so the page API sees the same browser.
//   no-opfs      navigator.storage.getDirectory() rejects with a SecurityError, as in a private window
//   small-quota  navigator.storage.estimate() reports 10 MB free (less than the model)
const fault = new URL(self.location.href).searchParams.get('fault') ?? self.__clefStorageFault;
if (fault === 'no-opfs') {
  StorageManager.prototype.getDirectory = () => Promise.reject(new DOMException('The operation is insecure.', 'SecurityError'));
} else if (fault === 'small-quota') {
  StorageManager.prototype.estimate = async () => ({ quota: 10e6, usage: 0 });
}
