// Passive health, once: an undici interceptor on each upstream pool feeds InstanceHealth from every
// exchange with the engine (proxied requests and active probes alike). 5xx answers, connection and
// timeout errors, and streams that break count as failures; any other answer as a success. A
// request we abort ourselves (the client went away) says nothing about the engine.
import { DecoratorHandler, type Dispatcher } from 'undici';
import type { InstanceHealth } from './health.js';

export type HealthEvent = 'ejected' | 'readmitted';

function ourAbort(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  return err.name === 'AbortError' || code === 'UND_ERR_ABORTED' || code === 'ABORT_ERR';
}

// undici's DecoratorHandler forwards every callback of the new handler API (and adapts legacy
// handlers); its published type omits the methods, so they are declared here.
interface Forwarding extends Dispatcher.DispatchHandler {
  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseStart']>>[2],
    statusMessage?: string,
  ): void;
  onResponseError(controller: Dispatcher.DispatchController, error: Error): void;
}
const Decorator = DecoratorHandler as unknown as new (handler: Dispatcher.DispatchHandler) => Forwarding;

class HealthHandler extends Decorator {
  private answered = false;

  constructor(
    handler: Dispatcher.DispatchHandler,
    private readonly health: InstanceHealth,
    private readonly now: () => number,
    private readonly onChange: (event: HealthEvent) => void,
  ) {
    super(handler);
  }

  override onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Parameters<Forwarding['onResponseStart']>[2],
    statusMessage?: string,
  ): void {
    this.answered = true;
    if (statusCode >= 500) {
      if (this.health.failure(this.now(), `HTTP ${statusCode}`)) this.onChange('ejected');
    } else if (this.health.success()) this.onChange('readmitted');
    super.onResponseStart(controller, statusCode, headers, statusMessage);
  }

  override onResponseError(controller: Dispatcher.DispatchController, err: Error): void {
    if (
      !ourAbort(err) &&
      this.health.failure(this.now(), this.answered ? `failed mid-response: ${err.message}` : err.message)
    )
      this.onChange('ejected');
    super.onResponseError(controller, err);
  }
}

/** The interceptor for one instance's pool: `pool.compose(healthInterceptor(...))`. */
export function healthInterceptor(
  health: InstanceHealth,
  now: () => number,
  onChange: (event: HealthEvent) => void,
): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => dispatch(opts, new HealthHandler(handler, health, now, onChange));
}
