//! The entry points behind the `lib.rs` shims: dispatch on the item under `#[durable_object]`
//! (struct or impl block), run parse → model → codegen, and on errors emit them together with
//! the user's item (helper attributes stripped) so that one mistake does not cascade.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Item, ItemImpl, ItemStruct};

use crate::attrs::{ImplArgs, ObjectArgs};
use crate::codegen;
use crate::entry::{self, Halves};
use crate::errors::Errors;
use crate::flavor::Flavor;
use crate::model::{HandlerSet, Object};
use crate::state_half;

/// `#[durable_object]` on any item.
pub(crate) fn durable_object(args: TokenStream, input: TokenStream) -> TokenStream {
    let halves = Halves {
        on_struct: object,
        on_impl: handler_set,
        misplaced,
    };
    entry::expand(Flavor::OBJECT, halves, args, input)
}

/// The struct half.
fn object(args: TokenStream, item: &ItemStruct) -> TokenStream {
    let mut errors = Errors::new();
    let args = ObjectArgs::parse(args, &mut errors);
    let body = match Object::from_ast(item, args, &mut errors) {
        Some(object) => codegen::object(&object),
        None => state_half::model::strip_field_attrs(item).into_token_stream(),
    };
    let errors = errors.finish();
    quote!(#errors #body)
}

/// The impl half.
fn handler_set(args: TokenStream, item: ItemImpl) -> TokenStream {
    let mut errors = Errors::new();
    let args = ImplArgs::parse(args, &mut errors);
    let body = match HandlerSet::from_ast(item, args, &mut errors) {
        Ok(set) => codegen::handler_set(&set),
        Err(item) => item.into_token_stream(),
    };
    let errors = errors.finish();
    quote!(#errors #body)
}

/// `#[durable_object]` on something that is neither a struct nor an impl block.
fn misplaced(item: &Item) -> TokenStream {
    let (span, message): (Span, String) = match item {
        Item::Enum(item) => (
            item.enum_token.span,
            format!(
                "the state of a durable object is a struct with named fields, not an enum: write `struct {0} {{ state: {0}State, .. }}` and keep the enum in a field",
                item.ident
            ),
        ),
        Item::Union(item) => (
            item.union_token.span,
            format!(
                "the state of a durable object is a struct with named fields, not a union: write `struct {} {{ .. }}`",
                item.ident
            ),
        ),
        Item::Fn(item) => (
            item.sig.fn_token.span,
            "`#[durable_object]` goes on a struct (the state) or on its impl block (the handlers), not on a function".to_owned(),
        ),
        Item::Trait(item) => (
            item.trait_token.span,
            "`#[durable_object]` goes on a struct (the state) or on its impl block (the handlers), not on a trait".to_owned(),
        ),
        _ => (
            entry::first_span(item),
            "`#[durable_object]` goes on a struct (the state) or on its impl block (the handlers)"
                .to_owned(),
        ),
    };
    let error = syn::Error::new(span, message).into_compile_error();
    quote!(#error #item)
}
