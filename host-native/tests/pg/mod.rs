//! A real PostgreSQL for the `--database` tests ([`cluster`]), and mailjar nodes on it.

#![allow(dead_code)]

mod cluster;
pub mod load;

pub use cluster::{Postgres, eventually};

use crate::common::Server;

/// Starts mailjar nodes on a cluster.
pub trait Nodes {
    /// Starts a mailjar node on this database with extra flags.
    fn node(&self, extra: &[&str]) -> Server;
}

impl Nodes for Postgres {
    fn node(&self, extra: &[&str]) -> Server {
        let url = self.url();
        let mut flags = vec!["--database", url.as_str()];
        flags.extend_from_slice(extra);
        Server::start_with(&flags)
    }
}
