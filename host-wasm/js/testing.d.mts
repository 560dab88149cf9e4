// Types of testing.mjs: fixtures and matchers for vitest and Playwright Test.
import { CapturedEmail, Inbox, MailjarMethods } from "./methods.mjs";

/** Fixtures for `test.extend(...)`: `mail` (what was passed in) and a fresh `inbox` per test. */
export function mailjarFixtures<M extends MailjarMethods>(mail: M): {
  mail: (context: {}, use: (mail: M) => Promise<void>) => Promise<void>;
  inbox: (context: { mail: M }, use: (inbox: Inbox) => Promise<void>) => Promise<void>;
};

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
