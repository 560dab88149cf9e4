// Type-checked with `tsc -p tsconfig.runners.json`: the fixture and the
// matchers typed in a vitest and a Playwright Test file.
import { MailServer } from "mailjar";
import { mailjarFixtures, type MailjarFixtures, type MailjarMatchers } from "mailjar/testing";
import { test as playwrightTest } from "@playwright/test";
import { expect, test as vitestTest } from "vitest";

// The matchers, declared once for vitest's expect.
declare module "vitest" {
  interface Assertion<T = any> extends MailjarMatchers<T> {}
}

/** A test file of each runner, with the typed fixture and matchers. */
export function suites(mail: MailServer): void {
  const pw = playwrightTest.extend<MailjarFixtures<MailServer>>(mailjarFixtures(mail));
  pw("playwright", async ({ inbox }) => {
    const address: string = inbox.address;
    void address;
  });
  const vt = vitestTest.extend(mailjarFixtures(mail));
  vt("vitest", async ({ inbox }) => {
    const email = await inbox.waitFor();
    expect(email).toHaveCode("482913");
    expect(email).toHaveLinkTo(/verify/);
  });
}

