// Type-checked with `tsc --noEmit`: the package's declarations describe what
// a TypeScript test writes.
import { MailServer, MailjarClient, MailjarError, type CapturedEmail, type CreatedInbox, type ListedInbox } from "mailjar";
import { mailjarFixtures, matchers } from "mailjar/testing";

export async function check(): Promise<string[]> {
  const mail = new MailServer({ api: { maxMessages: 100 } });
  const client = new MailjarClient("http://127.0.0.1:8025");
  const inbox = mail.createInbox();
  const email: CapturedEmail = await inbox.waitFor({ subject: /welcome/i }, { timeoutMs: 1000 });
  const code: string = await client.waitForCode({ to: inbox.address });
  const raw: Uint8Array | undefined = await client.raw(email.id);
  // The transport's info, as nodemailer hands it to its callback.
  mail.transport().send(undefined, (error, info) => {
    const stored: string | undefined = info?.storedId;
    void [error, stored];
  });
  // Fields the API may leave null are typed so.
  const date: string | null = email.date;
  const tls: string | undefined = email.smtp?.tls?.version;
  const fixtures = mailjarFixtures(client);
  const rule = await client.faults.add({ match: { to: inbox.address }, stage: "rcpt", action: { reply: { code: 550 } } });
  const held: number = (await mail.faults.list()).length + (await mail.faults.remove(rule.id));
  const verdict = matchers.toHaveCode(email, code);
  try {
    await client.waitFor({}, { timeoutMs: 1 });
  } catch (error) {
    if (error instanceof MailjarError && error.timeout) return [String(error.status)];
  }
  const deleted: number = await inbox.clear();
  // A mailjar with --admin-token: the admin makes an inbox, its token reads its mail.
  const admin = new MailjarClient("http://127.0.0.1:8025", { token: "admin-token-0123456789" });
  const team: CreatedInbox = await admin.inboxes.create({ name: "team-a", addresses: ["*@team-a.test"], maxMessages: 100 });
  const listed: ListedInbox[] = await admin.inboxes.list();
  const mine: CapturedEmail[] = await admin.withToken(team.token).list({ inbox: team.name });
  const login: string = team.smtp.username + (await admin.inboxes.rotate(team.name)).smtp.password;
  void [listed.map((i) => i.evicted + i.messages), mine, login, await admin.inboxes.delete("team-a")];
  mail.close();
  return [code, String(raw?.length), String(verdict.pass), String(deleted), typeof fixtures.inbox, String(held), String(date), String(tls)];
}

// With the admin token of a shared mailjar: each test's inbox is the server's own.
export async function checkServerInboxes(): Promise<string> {
  const admin = new MailjarClient("http://127.0.0.1:8025", { token: "admin-token-0123456789" });
  const fixtures = mailjarFixtures(admin, { serverInboxes: true });
  let seen = "";
  await fixtures.inbox({ mail: admin }, async (inbox) => {
    seen = inbox.name + inbox.smtp.password + inbox.address + (await inbox.client.list()).length;
  });
  return seen;
}
