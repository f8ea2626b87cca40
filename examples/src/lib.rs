//! Examples for the LDP workspace; see the `examples/` folder.

pub mod production;
