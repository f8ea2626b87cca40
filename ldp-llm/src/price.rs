//! What a model's tokens cost, to fill `cost_usd` in provenance.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{LlmError, Usage};

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per million input (prompt) tokens.
    pub input_per_mtok: f64,
    /// USD per million output (completion) tokens.
    pub output_per_mtok: f64,
}

/// Prices by model name. A model is priced by its exact name, else by the longest name that is a prefix of it:
/// providers answer with dated versions (`gpt-4o-2024-08-06`, `claude-3-5-haiku-20241022`) of the names people
/// configure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

impl PriceTable {
    /// An empty table: no cost is reported.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the price of `model`.
    #[must_use]
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// A table from JSON: `{"model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}, ...}`. Negative or
    /// non-finite prices are refused.
    pub fn from_json(text: &str) -> Result<Self, LlmError> {
        let prices: BTreeMap<String, Price> =
            serde_json::from_str(text).map_err(|e| LlmError::Config(format!("price table: {e}")))?;
        for (model, p) in &prices {
            for v in [p.input_per_mtok, p.output_per_mtok] {
                if !v.is_finite() || v < 0.0 {
                    return Err(LlmError::Config(format!("price table: {model}: a price must be finite and >= 0")));
                }
            }
        }
        Ok(Self { prices })
    }

    /// The price of `model`, by exact name or longest prefix.
    pub fn price(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.prices.get(model) {
            return Some(*p);
        }
        self.prices
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p)
    }

    /// The cost of `usage` on `model`; `None` when the model has no price or the usage is unknown.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let price = self.price(model)?;
        let (input, output) = (usage.input_tokens?, usage.output_tokens?);
        #[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
        Some((input as f64 * price.input_per_mtok + output as f64 * price.output_per_mtok) / 1_000_000.0)
    }
}
