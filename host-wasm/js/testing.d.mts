// Types of testing.mjs: fixtures and matchers for vitest and Playwright Test.
import { MailjarClient } from "./client.mjs";
import { CapturedEmail, Inbox, MailjarMethods } from "./methods.mjs";

/**
 * The fixtures `mailjarFixtures` gives, as a test sees them. Playwright Test
 * does not infer them: `base.extend<MailjarFixtures<MailServer>>(mailjarFixtures(mail))`.
 */
export type MailjarFixtures<M extends MailjarMethods = MailjarMethods> = { mail: M; inbox: Inbox };

/** Fixtures for `test.extend(...)`: `mail` (what was passed in) and a fresh `inbox` per test. */
export function mailjarFixtures<M extends MailjarMethods>(mail: M): {
  mail: (context: {}, use: (mail: M) => Promise<void>) => Promise<void>;
  inbox: (context: { mail: M }, use: (inbox: Inbox) => Promise<void>) => Promise<void>;
};
/**
 * With `serverInboxes` and a MailjarClient holding the admin token: each
 * test's `inbox` is an inbox of the server's own, deleted after the test.
 */
export function mailjarFixtures<M extends MailjarClient>(mail: M, options: { serverInboxes: true }): {
  mail: (context: {}, use: (mail: M) => Promise<void>) => Promise<void>;
  inbox: (context: { mail: M }, use: (inbox: ServerInbox) => Promise<void>) => Promise<void>;
};
export function mailjarFixtures<M extends MailjarMethods>(mail: M, options?: { serverInboxes?: boolean }): {
  mail: (context: {}, use: (mail: M) => Promise<void>) => Promise<void>;
  inbox: (context: { mail: M }, use: (inbox: Inbox) => Promise<void>) => Promise<void>;
};

/** An inbox of the server's own, as `mailjarFixtures(admin, { serverInboxes: true })` gives it. */
export interface ServerInbox extends Inbox {
  /** Its name on the server. */
  readonly name: string;
  /** Its API token. */
  readonly token: string;
  /** Its SMTP login: mail sent with it belongs to the inbox whatever its recipients. */
  readonly smtp: { username: string; password: string };
  /** A client with its token: every message of the inbox, whatever address or login brought it. */
  readonly client: MailjarClient;
}

/** A matcher's verdict. */
interface MatcherResult {
  pass: boolean;
  message: () => string;
  actual?: unknown;
  expected?: unknown;
}

/** Matchers for `expect.extend(matchers)`. */
export const matchers: {
  /** A link equal to, starting with, or matching `expected`. */
  toHaveLinkTo(email: CapturedEmail, expected: string | RegExp): MatcherResult;
  /** A code (4 to 8 digits), or this one. */
  toHaveCode(email: CapturedEmail, expected?: string | RegExp): MatcherResult;
};

/**
 * The matchers as `expect(email)` has them once extended. vitest needs them
 * declared once in the project (a `.d.ts` or any module of the tests):
 *
 * ```ts
 * import type { MailjarMatchers } from "mailjar/testing";
 * declare module "vitest" {
 *   interface Assertion<T = any> extends MailjarMatchers<T> {}
 * }
 * ```
 */
export interface MailjarMatchers<R = unknown> {
  /** A link equal to, starting with, or matching `expected`. */
  toHaveLinkTo(expected: string | RegExp): R;
  /** A code (4 to 8 digits), or this one. */
  toHaveCode(expected?: string | RegExp): R;
}
