//! The rules every method marked with a helper attribute follows, in both macros: a plain
//! method, without a `where` clause, borrowing the state through `self`.

use syn::{FnArg, Generics, PatType, ReceiverKind, Safety, Signature, Type, TypeReference};

use super::helpers::HelperAttr;
use crate::errors::Errors;
use crate::flavor::Flavor;

/// A marked method is a plain method: not `const`, `unsafe`, `extern` or variadic.
pub(crate) fn plain_signature<H: HelperAttr>(
    sig: &Signature,
    helper: H,
    flavor: Flavor,
    errors: &mut Errors,
) -> bool {
    let what = helper.what();
    let mut ok = true;
    if let Some(constness) = &sig.constness {
        ok = false;
        errors.spanned(
            constness,
            format!("{what} cannot be `const`: remove `const`"),
        );
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        ok = false;
        errors.spanned(
            unsafety,
            format!(
                "{what} cannot be `unsafe`: {} calls it as a safe method; remove `unsafe`",
                flavor.caller
            ),
        );
    }
    if let Some(abi) = &sig.abi {
        ok = false;
        errors.spanned(abi, format!("{what} cannot be `extern`: remove the ABI"));
    }
    if let Some(variadic) = &sig.variadic {
        ok = false;
        errors.spanned(variadic, format!("{what} cannot be variadic"));
    }
    ok
}

/// A marked method has no `where` clause: it has no parameters to bound.
pub(crate) fn no_where_clause<H: HelperAttr>(
    generics: &Generics,
    helper: H,
    errors: &mut Errors,
) -> bool {
    match &generics.where_clause {
        Some(clause) => {
            errors.spanned(
                clause,
                format!("{} cannot have a `where` clause: remove it", helper.what()),
            );
            false
        }
        None => true,
    }
}

/// A hook-like method borrows the state through `&self` or `&mut self`, without a lifetime;
/// `fix` says what to write instead of another receiver (or none).
pub(crate) fn borrowing_receiver(sig: &Signature, fix: String, errors: &mut Errors) -> bool {
    match sig.receiver() {
        Some(receiver) => match &receiver.kind {
            ReceiverKind::Reference(_, None, _) => true,
            ReceiverKind::Reference(_, Some(lifetime), _) => {
                errors.spanned(lifetime, "remove this lifetime: write `&mut self`");
                false
            }
            _ => {
                errors.spanned(receiver, fix);
                false
            }
        },
        None => {
            errors.spanned(&sig.ident, fix);
            false
        }
    }
}

/// The typed inputs of `sig` (after the receiver).
pub(crate) fn typed_inputs(sig: &Signature) -> impl Iterator<Item = &PatType> {
    sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(typed) => Some(typed),
        FnArg::Receiver(_) => None,
    })
}

/// `ty` when it is a reference to the type named `name` (`&Name` or `&path::Name`, without
/// generic arguments): how the context argument of a marked method is recognised.
pub(crate) fn reference_to<'a>(ty: &'a Type, name: &str) -> Option<&'a TypeReference> {
    let Type::Reference(reference) = ty else {
        return None;
    };
    let Type::Path(path) = &*reference.elem else {
        return None;
    };
    let last = path.path.segments.last()?;
    (path.qself.is_none() && last.ident == name && last.arguments.is_none()).then_some(reference)
}
