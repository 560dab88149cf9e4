//! Parsing a received message into the fields of a CapturedEmail.
