// The REST client: this jobmanager's JSON endpoints (same origin), polled every POLL_MS.

export const POLL_MS = 2000;
const FETCH_TIMEOUT_MS = 4000;

export async function api(path) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const res = await fetch(path, { signal: ctrl.signal, cache: 'no-store', headers: { Accept: 'application/json' } });
    if (!res.ok) {
      const err = new Error(`${path} answered HTTP ${res.status}`);
      err.status = res.status;
      throw err;
    }
    return await res.json();
  } catch (e) {
    if (e.name === 'AbortError') throw new Error(`${path} did not answer within ${FETCH_TIMEOUT_MS / 1000} s`);
    if (e instanceof TypeError) throw new Error(`no answer from ${path}`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}
