//! One row of the compiled caniemail table (`caniemail_data.rs`).

/// One feature of the caniemail data set, as the generated table has it.
#[derive(Debug)]
pub struct Feature {
    /// The data set's name for it, e.g. `css-display-flex`.
    pub slug: &'static str,
    /// Its title, e.g. `display:flex`.
    pub title: &'static str,
    /// What in a message shows it is used (any one of these); see [`Facts`](super::facts::Facts).
    pub needles: &'static [&'static str],
    /// Its support per client of the table's `CLIENTS`: `y`es, `a` (partial), `n`o, `u`nknown.
    pub support: &'static [u8],
}
