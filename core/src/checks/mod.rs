//! Checks a tester runs on a stored message, on request.
//!
//! Only the pure ones live in the core: [`html`], the HTML and CSS
//! compatibility of a message with the common mail clients. The checks that
//! need the network (links, spam score, DKIM/SPF/DMARC) belong to the hosts.

mod caniemail_data;
mod css;
mod facts;
mod feature;
pub mod html;
mod scan;
