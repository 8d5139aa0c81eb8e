//! The `#[durable_object]` attribute. Use it through `durable_runtime::durable_object`.
use proc_macro::TokenStream;

/// Declares a durable object.
#[proc_macro_attribute]
pub fn durable_object(_args: TokenStream, input: TokenStream) -> TokenStream {
    input
}
