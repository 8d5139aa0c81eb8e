//! The error accumulator of one expansion (serde's `Ctxt`): every rule pushes into it and
//! carries on, so the user sees all of an item's errors at once. Dropping it without
//! [`Errors::finish`] panics, so an error cannot be lost.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;

/// The errors found so far in one item.
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
    finished: bool,
}

impl Errors {
    /// No errors yet.
    pub(crate) fn new() -> Self {
        Self {
            errors: Vec::new(),
            finished: false,
        }
    }

    /// An error covering all of `tokens` (from their first to their last token).
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    /// A parse error, from darling or syn.
    pub(crate) fn push(&mut self, error: impl Into<syn::Error>) {
        self.errors.push(error.into());
    }

    /// The value of a darling parse, or `None` after recording its errors.
    pub(crate) fn handle<T>(&mut self, result: darling::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// Every error as `compile_error!` invocations (empty when there is none).
    pub(crate) fn finish(mut self) -> TokenStream {
        self.finished = true;
        let mut errors = std::mem::take(&mut self.errors).into_iter();
        let Some(mut first) = errors.next() else {
            return TokenStream::new();
        };
        for error in errors {
            first.combine(error);
        }
        first.into_compile_error()
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            panic!("durable-macros: an error accumulator was dropped without `finish`");
        }
    }
}
