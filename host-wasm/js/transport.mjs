// A nodemailer transport that hands each message to an in-process
// `MailServer` through a real SMTP session (EHLO, MAIL, RCPT, DATA), so what
// the application's mail code produces is captured exactly as the native
// server would capture it, with no port. nodemailer is a peer: this module
// only implements its transport interface (`name`, `version`, `send`).

/** The version this transport reports to nodemailer. */
const VERSION = "0.1.0";

/** An SMTP refusal, shaped like nodemailer's own SMTP errors (`responseCode`, `response`, `command`). */
function smtpError(reply, command) {
  const error = new Error(`Can't send mail - ${command} answered ${reply.code} ${reply.text}`);
  error.code = "EENVELOPE";
  error.responseCode = reply.code;
  error.response = reply.wire.trimEnd();
  error.command = command;
  return error;
}

/** The message with CRLF line ends and dot-stuffing, ended by the `.` line. */
function dataBlock(message) {
  const text = Buffer.from(message).toString("latin1").replace(/\r?\n/g, "\r\n");
  // A line starts after CRLF only (JS's multiline ^ would also match after a bare CR).
  const stuffed = text.replace(/(^|\r\n)\./g, "$1..");
  const ended = stuffed.endsWith("\r\n") ? stuffed : `${stuffed}\r\n`;
  return Buffer.from(`${ended}.\r\n`, "latin1");
}

/** Reads a nodemailer message stream into one Buffer. */
function readAll(stream) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    stream.on("data", (chunk) => chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.on("error", reject);
  });
}

/**
 * The transport object for `nodemailer.createTransport(...)`; use
 * `MailServer.transport()`. `info.messageId` is the Message-ID header and
 * `info.storedId` the id mailjar stored the message under.
 */
export function nodemailerTransport(server, { hostname = "nodemailer.local" } = {}) {
  return {
    name: "mailjar",
    version: VERSION,
    send(mail, callback) {
      const envelope = mail.message.getEnvelope();
      readAll(mail.message.createReadStream())
        .then((message) => {
          const connection = server.connect();
          const step = (line, command, expected) => {
            const replies = connection.send(line);
            const last = replies.at(-1);
            if (!last || !expected.includes(last.code)) throw smtpError(last ?? { code: 0, text: "no reply", wire: "" }, command);
            return last;
          };
          try {
            step(`EHLO ${hostname}\r\n`, "EHLO", [250]);
            step(`MAIL FROM:<${envelope.from || ""}>\r\n`, "MAIL FROM", [250]);
            const accepted = [];
            const rejected = [];
            let refusal;
            for (const to of envelope.to) {
              const reply = connection.send(`RCPT TO:<${to}>\r\n`).at(-1);
              if (reply?.code === 250 || reply?.code === 251) accepted.push(to);
              else {
                rejected.push(to);
                refusal = smtpError(reply ?? { code: 0, text: "no reply", wire: "" }, "RCPT TO");
              }
            }
            if (!accepted.length) throw refusal ?? new Error("no recipients");
            step("DATA\r\n", "DATA", [354]);
            const done = step(dataBlock(message), "DATA", [250]);
            connection.send("QUIT\r\n");
            callback(null, {
              envelope,
              messageId: mail.message.messageId(),
              storedId: done.messageId,
              response: done.wire.trimEnd(),
              accepted,
              rejected,
            });
          } catch (error) {
            connection.send("QUIT\r\n");
            callback(error);
          }
        })
        .catch((error) => callback(error));
    },
  };
}
