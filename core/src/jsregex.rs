//! ECMAScript regular expressions, as Node runs them, on top of `regex` and `fancy-regex`.
