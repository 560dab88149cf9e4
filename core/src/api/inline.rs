//! The calling contract run in a row on one thread, for hosts without a
//! lock to keep short: the wasm host, tests, benchmarks.

use super::{Answered, Api, Delivered, Output, Request};
use crate::budget::Clock;
use crate::id::Entropy;
use crate::response::Response;
use crate::store::Prepared;

impl<W> Api<W> {
    /// Answers a request, running its work on this thread: a response now, a
    /// parked wait (its answer comes out later as [`Output::Respond`] with
    /// `client`), or an event stream. Outputs for other requests stay queued
    /// for [`Api::poll_output`], in order; what left the store is freed here.
    pub fn answer(
        &mut self,
        client: W,
        request: &Request,
        now_ms: u64,
        clock: &dyn Clock,
    ) -> Answered {
        // Outputs queued before this request are not its own.
        let mut others: Vec<Output<W>> = self.outputs.drain(..).collect();
        let id = self.handle_request(client, request, now_ms);
        let mut answered = None;
        while let Some(output) = self.outputs.pop_front() {
            match output {
                Output::Run(job) => {
                    let done = job.run(clock);
                    self.handle_done(done, now_ms);
                }
                Output::Respond(client, response) if answered.is_none() => {
                    drop(client);
                    answered = Some(Answered::Ready(response));
                }
                Output::Subscribed(client, subscription) if answered.is_none() => {
                    drop(client);
                    answered = Some(Answered::Subscribed(subscription));
                }
                Output::Removed(removed) => drop(removed),
                other => others.push(other),
            }
        }
        self.outputs.extend(others);
        answered.unwrap_or_else(|| match self.waits.deadline(id) {
            Some(deadline_ms) => Answered::Waiting { id, deadline_ms },
            // Held for a write that this host never makes: it has no disk.
            None => Answered::Ready(Response::error(503, "the request was not answered")),
        })
    }

    /// Stores a message and answers the waits it matches, on this thread:
    /// their clients with their responses, in wait order. Outputs for other
    /// requests stay queued; what left the store is freed here.
    pub fn deliver_and_wake(
        &mut self,
        message: Prepared,
        now_ms: u64,
        entropy: Entropy,
        clock: &dyn Clock,
    ) -> Delivered<W> {
        let mut others: Vec<Output<W>> = self.outputs.drain(..).collect();
        let id = self.deliver(message, now_ms, entropy);
        let mut woken = Vec::new();
        while let Some(output) = self.poll_output() {
            match output {
                Output::Match(batch) => {
                    let matches = batch.run(clock);
                    self.handle_matches(matches);
                }
                Output::Respond(client, response) => woken.push((client, response)),
                Output::Removed(removed) => drop(removed),
                other => others.push(other),
            }
        }
        self.outputs.extend(others);
        Delivered { id, woken }
    }
}
