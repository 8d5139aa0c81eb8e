//! `#[durable_fsm]`: the same pipeline as `#[durable_object]` (darling receivers in
//! [`attrs`], an IR built by [`model`] under the rules of [`validate`], output from
//! [`codegen`]), sharing the object macro's argument parsing ([`crate::args`]), state struct
//! ([`crate::state_half`]), impl block shape ([`crate::impl_half`]), error accumulator and
//! runtime paths.

mod attrs;
mod codegen;
mod model;
mod validate;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Item, ItemImpl, ItemStruct};

use crate::errors::Errors;
use attrs::{FsmArgs, FsmImplArgs};
use model::{FsmStruct, StepSet};

/// `#[durable_fsm]` on any item.
pub(crate) fn durable_fsm(args: TokenStream, input: TokenStream) -> TokenStream {
    let output = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Struct(item)) => state(args, &item),
        Ok(Item::Impl(item)) => steps(args, item),
        Ok(item) => misplaced(&item),
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#error #input)
        }
    };
    if std::env::var_os("DURABLE_MACROS_DEBUG").is_some() {
        eprintln!("#[durable_fsm] expansion:\n{output}\n");
    }
    output
}

/// The struct half.
fn state(args: TokenStream, item: &ItemStruct) -> TokenStream {
    let mut errors = Errors::new();
    let args = FsmArgs::parse(args, &mut errors);
    let body = match FsmStruct::from_ast(item, args, &mut errors) {
        Some(fsm) => codegen::state(&fsm),
        None => crate::state_half::model::strip_field_attrs(item).into_token_stream(),
    };
    let errors = errors.finish();
    quote!(#errors #body)
}

/// The impl half.
fn steps(args: TokenStream, item: ItemImpl) -> TokenStream {
    let mut errors = Errors::new();
    let args = FsmImplArgs::parse(args, &mut errors);
    let body = match StepSet::from_ast(item, args, &mut errors) {
        Ok(set) => codegen::steps(&set),
        Err(item) => item.into_token_stream(),
    };
    let errors = errors.finish();
    quote!(#errors #body)
}

/// `#[durable_fsm]` on something that is neither a struct nor an impl block.
fn misplaced(item: &Item) -> TokenStream {
    let span = item
        .to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |token| token.span());
    let message = match item {
        Item::Enum(item) => format!(
            "the state of a durable FSM is a struct with named fields, not an enum: write `struct {0} {{ state: {0}State, .. }}` and keep the enum in a field (the FSM's steps are its states)",
            item.ident
        ),
        _ => "`#[durable_fsm]` goes on a struct (the state) or on its impl block (the steps)"
            .to_owned(),
    };
    let error = syn::Error::new(span, message).into_compile_error();
    quote!(#error #item)
}

/// `#[step]` or `#[on_error]` outside a `#[durable_fsm]` impl block.
pub(crate) fn stray_helper(name: &str, input: TokenStream) -> TokenStream {
    let error = syn::Error::new(
        Span::call_site(),
        format!(
            "`#[{name}]` only has meaning inside a `#[durable_fsm]` impl block: add `#[durable_fsm]` to the impl block, or remove `#[{name}]`"
        ),
    )
    .into_compile_error();
    quote!(#error #input)
}
