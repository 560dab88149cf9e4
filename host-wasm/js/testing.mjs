// Test-runner helpers: a fixture that gives each test its own inbox (for
// vitest's and Playwright Test's `test.extend`), and matchers for their
// `expect.extend`: `toHaveLinkTo` and `toHaveCode`.

/**
 * Fixtures for `test.extend(...)` (vitest or Playwright Test): `mail` is the
 * server or client passed in, `inbox` a fresh inbox on it for each test.
 * When the test ends (passed, failed or timed out) the inbox's pending
 * waits end with "the test ended" (nothing stays parked on the server) and
 * its mail is cleared.
 *
 * With `{ serverInboxes: true }` and a MailjarClient holding the admin token
 * of a mailjar with `--admin-token`, each test's `inbox` is an inbox of the
 * server's own (`name`, `token`, `smtp` login, and `client`: a MailjarClient
 * with its token): the server keeps every other test's mail from it, so
 * workers and runs sharing one mailjar cannot see, delete or crowd out each
 * other's mail. It is deleted, with its mail, when the test ends.
 *
 * ```js
 * const test = base.extend(mailjarFixtures(new MailjarClient(url)));
 * test("sign-up", async ({ inbox }) => { ... });
 * ```
 */
export function mailjarFixtures(mail, { serverInboxes = false } = {}) {
  if (!mail || typeof mail.createInbox !== "function") throw new TypeError("mailjarFixtures takes a MailServer or a MailjarClient");
  if (serverInboxes && typeof mail.inboxes?.create !== "function") throw new TypeError("serverInboxes needs a MailjarClient with the admin token");
  return {
    // Both runners read a fixture's first parameter as a destructuring pattern: it must stay `{}`.
    // eslint-disable-next-line no-empty-pattern
    mail: async ({}, use) => {
      await use(mail);
    },
    inbox: serverInboxes ? serverInbox : addressInbox,
  };
}

/** A fresh address on the shared mailbox; its mail is cleared after the test. */
async function addressInbox({ mail: server }, use) {
  const ended = new AbortController();
  const inbox = server.createInbox({ signal: ended.signal });
  try {
    await use(inbox);
  } finally {
    ended.abort(new Error("the test ended"));
    await server.clear({ to: inbox.address }).catch(() => {});
  }
}

/** An inbox of the server's own, made with the admin token and deleted after the test. */
async function serverInbox({ mail: admin }, use) {
  const name = `test-${globalThis.crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const domain = `${name}.mailjar.test`;
  const created = await admin.inboxes.create({ name, addresses: [`*@${domain}`] });
  const ended = new AbortController();
  const client = admin.withToken(created.token);
  const inbox = client.createInbox({ domain, signal: ended.signal });
  const fixed = (value) => ({ value, enumerable: true });
  Object.defineProperties(inbox, { name: fixed(name), token: fixed(created.token), smtp: fixed(created.smtp), client: fixed(client) });
  try {
    await use(inbox);
  } finally {
    ended.abort(new Error("the test ended"));
    await admin.inboxes.delete(name).catch(() => {});
  }
}

function describeMatch(expected) {
  return expected instanceof RegExp ? String(expected) : JSON.stringify(expected);
}

function matches(expected, value) {
  if (expected === undefined) return true;
  if (expected instanceof RegExp) {
    expected.lastIndex = 0;
    return expected.test(value);
  }
  return value === String(expected) || value.startsWith(String(expected));
}

/**
 * Matchers for `expect.extend(matchers)`:
 * `expect(email).toHaveLinkTo("https://app.test/verify")` (a prefix or a RegExp),
 * `expect(email).toHaveCode()` or `.toHaveCode("482913")` (or a RegExp).
 */
export const matchers = {
  /** The message has a link equal to, starting with, or matching `expected`. */
  toHaveLinkTo(email, expected) {
    const links = email?.links ?? [];
    const pass = links.some((link) => matches(expected, link));
    return {
      pass,
      message: () => `expected the message ${pass ? "not " : ""}to have a link to ${describeMatch(expected)}; its links: ${JSON.stringify(links)}`,
      actual: links,
      expected,
    };
  },
  /** The message has a one-time code (4 to 8 digits), or this one. */
  toHaveCode(email, expected) {
    const codes = email?.codes ?? [];
    const pass = expected === undefined ? codes.length > 0 : codes.some((code) => matches(expected, code) && (expected instanceof RegExp || code === String(expected)));
    return {
      pass,
      message: () => `expected the message ${pass ? "not " : ""}to have ${expected === undefined ? "a code" : `the code ${describeMatch(expected)}`}; its codes: ${JSON.stringify(codes)}`,
      actual: codes,
      expected,
    };
  },
};
