//! The state struct, the half both macros share: [`model`] reads it (fields, `#[field(..)]`
//! defaults, stored name) under the rules of [`validate`], and [`codegen`] writes it out with
//! serde's derives, `Default` and the field checks. Each macro adds its own options and trait
//! impl; a [`crate::flavor::Flavor`] gives the messages its words.

pub(crate) mod codegen;
pub(crate) mod model;
mod validate;
