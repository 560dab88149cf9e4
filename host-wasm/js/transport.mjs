// A nodemailer transport that hands each message to an in-process
// `MailServer` through a real SMTP session (EHLO, MAIL, RCPT, DATA), so what
// the application's mail code produces is captured exactly as the native
// server would capture it, with no port. nodemailer is a peer: this module
// only implements its transport interface (`name`, `version`, `send`).

/** The version this transport reports to nodemailer. */
const VERSION = "0.1.0";

/**
 * An SMTP refusal, shaped like nodemailer's own SMTP errors: `code`
 * (EENVELOPE for MAIL, RCPT and the DATA command, EMESSAGE for the message
 * after it, `command` "MESSAGE"), `responseCode`,
 * `response`, `command`. No reply (the server closed the connection, as a
 * `disconnect` fault does) is ECONNECTION, as nodemailer reports a dropped socket.
 */
function smtpError(reply, command, code = command === "MESSAGE" ? "EMESSAGE" : "EENVELOPE") {
  if (reply === undefined) {
    const error = new Error("Connection closed unexpectedly");
    error.code = "ECONNECTION";
    error.command = command;
    return error;
  }
  const error = new Error(`Can't send mail - ${command} answered ${reply.code} ${reply.text}`);
  error.code = code;
  error.responseCode = reply.code;
  error.response = reply.wire.trimEnd();
  error.command = command;
  return error;
}

/** Whether an address needs SMTPUTF8 (RFC 6531): anything beyond ASCII. */
const NON_ASCII = /[^\u0000-\u007f]/;

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
            const last = connection.send(line).at(-1);
            if (!last || !expected.includes(last.code)) throw smtpError(last, command);
            return last;
          };
          try {
            step(`EHLO ${hostname}\r\n`, "EHLO", [250]);
            // As nodemailer's SMTP transport does with a server that offers it.
            const utf8 = [envelope.from || "", ...envelope.to].some((a) => NON_ASCII.test(a));
            step(`MAIL FROM:<${envelope.from || ""}>${utf8 ? " SMTPUTF8" : ""}\r\n`, "MAIL FROM", [250]);
            const accepted = [];
            const rejected = [];
            let refusal;
            for (const to of envelope.to) {
              const reply = connection.send(`RCPT TO:<${to}>\r\n`).at(-1);
              if (reply?.code === 250 || reply?.code === 251) accepted.push(to);
              else {
                rejected.push(to);
                refusal = smtpError(reply, "RCPT TO");
              }
            }
            if (!accepted.length) throw refusal ?? new Error("no recipients");
            step("DATA\r\n", "DATA", [354]);
            const done = step(dataBlock(message), "MESSAGE", [250]);
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
            if (!connection.closed) connection.send("QUIT\r\n");
            callback(error);
          }
        })
        .catch((error) => callback(error));
    },
  };
}
