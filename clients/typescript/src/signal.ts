// Deadlines and pauses on AbortSignal, written out because Node 18 has no
// AbortSignal.any, and so every timer is cleared when its work ends (a
// dangling timer keeps a short-lived process or an edge isolate alive).

/** Deadline is a signal that aborts when its parent does or its time runs out. */
export interface Deadline {
  readonly signal: AbortSignal;
  /** timedOut reports whether the time ran out (not the parent). */
  timedOut(): boolean;
  /** done clears the timer and the parent's listener. */
  done(): void;
}

/**
 * deadline returns a signal ending after ms (none when ms is undefined) or
 * when parent aborts, with the parent's reason or a TimeoutError.
 */
export function deadline(ms: number | undefined, parent?: AbortSignal): Deadline {
  const ctl = new AbortController();
  let fired = false;
  const onAbort = () => ctl.abort(parent?.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  const timer =
    ms === undefined
      ? undefined
      : setTimeout(() => {
          fired = true;
          ctl.abort(new DOMException(`timed out after ${ms} ms`, "TimeoutError"));
        }, ms);
  return {
    signal: ctl.signal,
    timedOut: () => fired && !parent?.aborted,
    done: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

/** sleep resolves after ms, or rejects with signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
