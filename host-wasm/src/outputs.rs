//! What a session asks its host to do, in the two forms JavaScript gets it:
//! objects (`SessionOutput[]`, `src/outputs.d.ts`) and the wire text of
//! `Session.receiveInto`.

use js_sys::{Array, Object, Uint8Array};
use mailjar_core::smtp::Action;
use mailjar_core::smtp::{self, Envelope, Output, Reply};
use wasm_bindgen::{JsCast, JsValue};

use crate::js::{json_array, json_value, set};

/// A session output as JSON, in the shape of its `SessionOutput`; a message
/// is `{"type": "message"}` here, its fields are set on the parsed object.
#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum OutputJson<'a> {
    Reply {
        code: u16,
        text: String,
        lines: &'a [String],
        wire: String,
    },
    Message {},
    Starttls,
    Close,
    Fault {
        id: &'a str,
        stage: &'a str,
        action: ActionJson<'a>,
    },
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
enum ActionJson<'a> {
    Reply { code: u16, text: &'a str },
    Disconnect(bool),
    DelayMs(u64),
}

fn action_json(action: &Action) -> ActionJson<'_> {
    match action {
        Action::Reply { code, text } => ActionJson::Reply { code: *code, text },
        Action::Disconnect => ActionJson::Disconnect(true),
        Action::Delay { ms } => ActionJson::DelayMs(*ms),
    }
}

fn reply_json(reply: &Reply) -> OutputJson<'_> {
    OutputJson::Reply {
        code: reply.code,
        text: reply.text(),
        lines: &reply.lines,
        wire: String::from_utf8_lossy(&reply.to_bytes()).into_owned(),
    }
}

fn output_json(output: &Output) -> OutputJson<'_> {
    match output {
        Output::Reply(reply) => reply_json(reply),
        Output::Message(_) => OutputJson::Message {},
        Output::StartTls => OutputJson::Starttls,
        Output::Close => OutputJson::Close,
        Output::Fault(fired) => OutputJson::Fault {
            id: &fired.id,
            stage: fired.stage.name(),
            action: action_json(&fired.action),
        },
    }
}

/// A reply as a `ReplyOutput`.
pub fn reply_object(reply: &Reply) -> JsValue {
    json_value(&reply_json(reply))
}

/// Outputs as `SessionOutput[]`, through one JSON text (one crossing
/// instead of one per property); each `message` gets its fields set after.
pub fn outputs_of(outputs: &[Output]) -> Array {
    let items: Vec<OutputJson<'_>> = outputs.iter().map(output_json).collect();
    let array = json_array(&items);
    for (i, output) in outputs.iter().enumerate() {
        if let Output::Message(_) = output {
            let object: Object = array.get(i as u32).unchecked_into();
            fill_message_object(&object, output);
        }
    }
    array
}

fn fill_message_object(object: &Object, output: &Output) {
    if let Output::Message(message) = output {
        set(object, "envelope", envelope_object(&message.envelope));
        set(object, "raw", Uint8Array::from(message.raw.as_slice()));
        set(
            object,
            "helo",
            message
                .helo
                .as_deref()
                .map_or(JsValue::NULL, JsValue::from_str),
        );
        let facts = smtp::SmtpFacts::new(message.helo.clone(), message.session.clone());
        set(object, "smtp", json_value(&facts));
        let transcript = message.transcript.as_bytes();
        set(object, "transcript", Uint8Array::from(transcript));
    }
}

fn envelope_object(envelope: &Envelope) -> JsValue {
    let object = Object::new();
    set(&object, "from", envelope.from.as_str());
    let to: Array = envelope.to.iter().map(|t| JsValue::from_str(t)).collect();
    set(&object, "to", to);
    object.into()
}

/// Appends a session output as `Session.receiveInto` gives it: a reply as
/// its wire text, a stored message as `stored <id>`, a fault as `fault`
/// and the JSON of `[id, stage, action]`, `starttls` and `close` as those
/// words; each ends with CRLF. Reply lines hold no CR or LF, so a line
/// that starts with a digit is a reply's and no text can pass for another
/// output.
pub fn write_wire_output(output: &Output, stored: Option<&str>, out: &mut Vec<u8>) {
    match output {
        Output::Reply(reply) => reply.write_to(out),
        Output::Message(_) => {
            out.extend_from_slice(b"stored ");
            out.extend_from_slice(stored.unwrap_or_default().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Output::StartTls => out.extend_from_slice(b"starttls\r\n"),
        Output::Close => out.extend_from_slice(b"close\r\n"),
        Output::Fault(fired) => {
            out.extend_from_slice(b"fault ");
            let fault = (&fired.id, fired.stage.name(), action_json(&fired.action));
            // Serialising strings and numbers into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, &fault);
            out.extend_from_slice(b"\r\n");
        }
    }
}
