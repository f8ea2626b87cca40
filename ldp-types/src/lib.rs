//! The LDP wire model.
