//! What both macros do around an expansion, alike: dispatch on the item under the attribute,
//! print the expansion when asked, and refuse a helper attribute used outside its impl block.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Item, ItemImpl, ItemStruct};

use crate::flavor::Flavor;

/// The two halves of a macro and its error for any other item.
pub(crate) struct Halves {
    /// On the state struct.
    pub(crate) on_struct: fn(TokenStream, &ItemStruct) -> TokenStream,
    /// On the impl block.
    pub(crate) on_impl: fn(TokenStream, ItemImpl) -> TokenStream,
    /// On anything else.
    pub(crate) misplaced: fn(&Item) -> TokenStream,
}

/// The attribute on any item: runs the half the item calls for. Set `DURABLE_MACROS_DEBUG`
/// to print every expansion to stderr.
pub(crate) fn expand(
    flavor: Flavor,
    halves: Halves,
    args: TokenStream,
    input: TokenStream,
) -> TokenStream {
    let output = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Struct(item)) => (halves.on_struct)(args, &item),
        Ok(Item::Impl(item)) => (halves.on_impl)(args, item),
        Ok(item) => (halves.misplaced)(&item),
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#error #input)
        }
    };
    if std::env::var_os("DURABLE_MACROS_DEBUG").is_some() {
        eprintln!("#[{}] expansion:\n{output}\n", flavor.attribute);
    }
    output
}

/// The span of the first token of `item`.
pub(crate) fn first_span(item: &Item) -> Span {
    item.to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |token| token.span())
}

/// The helper attribute `name` outside an impl block of the macro (inside one, the block's
/// expansion removes it before it runs): an error, and the item unchanged.
pub(crate) fn stray_helper(name: &str, flavor: Flavor, input: TokenStream) -> TokenStream {
    let attribute = flavor.attribute;
    let error = syn::Error::new(
        Span::call_site(),
        format!(
            "`#[{name}]` only has meaning inside a `#[{attribute}]` impl block: add `#[{attribute}]` to the impl block, or remove `#[{name}]`"
        ),
    )
    .into_compile_error();
    quote!(#error #input)
}
