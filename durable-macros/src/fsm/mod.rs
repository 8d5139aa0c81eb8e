//! `#[durable_fsm]`: the same pipeline as `#[durable_object]` (darling receivers in
//! [`attrs`], an IR built by [`model`] under the rules of [`validate`], output from
//! [`codegen`]), sharing the object macro's argument parsing ([`crate::args`]), state struct
//! ([`crate::state_half`]), impl block shape ([`crate::impl_half`]), error accumulator and
//! runtime paths.

mod attrs;
mod codegen;
mod job;
mod model;
mod validate;

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::{Item, ItemImpl, ItemStruct};

use crate::entry::{self, Halves};
use crate::errors::Errors;
use crate::flavor::Flavor;
use attrs::{FsmArgs, FsmImplArgs};
use model::{FsmStruct, StepSet};

pub(crate) use job::job;

/// `#[durable_fsm]` on any item.
pub(crate) fn durable_fsm(args: TokenStream, input: TokenStream) -> TokenStream {
    let halves = Halves {
        on_struct: state,
        on_impl: steps,
        misplaced,
    };
    entry::expand(Flavor::FSM, halves, args, input)
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
    let span = entry::first_span(item);
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
