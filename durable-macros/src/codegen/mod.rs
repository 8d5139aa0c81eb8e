//! Code generation. Reads only the IR of [`crate::model`]; never parses or validates.
//!
//! - [`state`]: the struct half (serde derives, `Default`, `DurableObject`, field checks);
//! - [`handlers`]: the impl half's `Handlers` impl and its type checks;
//! - [`client`]: the typed clients, the handle type and its methods;
//! - [`caller`]: the callers with per-call options (`<Object>::with`) and their methods;
//! - [`exposed`]: with `expose`, the table of handlers callable by name;
//! - [`describe`]: the static description of fields and handlers, for introspection.
//!
//! Conventions: every path is absolute (`::core::..`, `::std::..`, `<root>::__private::..`),
//! so user items named `Result`, `Option` or `durable_runtime` cannot capture it; hidden items
//! live in `const _: () = { .. };`; generated locals start with `__`; every item users can see
//! has a doc comment; type checks are spanned at the user's type, so that an error lands where
//! the user looks.

mod caller;
mod client;
mod describe;
mod exposed;
mod handlers;
mod state;

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::Type;
use syn::visit_mut::{self, VisitMut};

use crate::model::{ErrorType, HandlerSet, Object};

/// The struct half: the struct itself, its trait impls and its handle type.
pub(crate) fn object(object: &Object) -> TokenStream {
    let state = state::expand(object);
    let handle = client::handle_type(object);
    let caller = caller::caller_type(object);
    quote!(#state #handle #caller)
}

/// The impl half: the user's impl block, the `Handlers` impl and the clients.
pub(crate) fn handler_set(set: &HandlerSet) -> TokenStream {
    let item = &set.item;
    let handlers = handlers::expand(set);
    let clients = client::clients(set);
    let callers = caller::caller_methods(set);
    let exposed = set.expose.then(|| exposed::expand(set));
    quote!(#item #handlers #clients #callers #exposed)
}

/// Wraps hidden items in an anonymous constant, so that they add no names to the user's
/// module.
pub(crate) fn wrap_in_const(tokens: TokenStream) -> TokenStream {
    quote! {
        const _: () = {
            #tokens
        };
    }
}

/// `ty` with every `Self` replaced by `object`, for code outside the object's impl blocks.
/// The error type of a fallible handler, with `Self` replaced by `object`: as written, or
/// found through the runtime's `HandlerResult` trait behind a one-argument alias.
fn error_type(err: &ErrorType, object: &Type, private: &TokenStream) -> TokenStream {
    match err {
        ErrorType::Written(ty) => replace_self(ty, object).into_token_stream(),
        ErrorType::OfAlias(result) => {
            let result = replace_self(result, object);
            quote!(<#result as #private::HandlerResult>::Error)
        }
    }
}

pub(crate) fn replace_self(ty: &Type, object: &Type) -> Type {
    struct ReplaceSelf<'a>(&'a Type);

    impl VisitMut for ReplaceSelf<'_> {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::Path(path) = ty
                && path.qself.is_none()
                && path.path.is_ident("Self")
            {
                *ty = self.0.clone();
                return;
            }
            visit_mut::visit_type_mut(self, ty);
        }
    }

    let mut ty = ty.clone();
    ReplaceSelf(object).visit_type_mut(&mut ty);
    ty
}

/// A `#[doc = ".."]` attribute.
fn doc(text: &str) -> TokenStream {
    let text = format!(" {text}");
    quote!(#[doc = #text])
}

/// Several doc paragraphs.
fn docs<I>(paragraphs: I) -> TokenStream
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut out = TokenStream::new();
    for (index, paragraph) in paragraphs.into_iter().enumerate() {
        if index > 0 {
            out.extend(quote!(#[doc = ""]));
        }
        for line in paragraph.as_ref().lines() {
            doc(line).to_tokens(&mut out);
        }
    }
    out
}
