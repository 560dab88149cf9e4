// Linking abort signals: one place for the listener that must be removed
// again, so a long-lived signal (a test's, an inbox's) does not collect one
// listener per call.

/**
 * Aborts `controller` with `signal`'s reason when `signal` aborts (at once
 * when it already has); returns the function that stops following it.
 * `signal` may be undefined or null: nothing to follow.
 */
export function abortWith(controller, signal) {
  if (signal == null) return () => {};
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => {};
  }
  const abort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", abort, { once: true });
  return () => signal.removeEventListener("abort", abort);
}
