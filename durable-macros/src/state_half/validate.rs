//! The rules of the state struct, shared by both macros: one documented function per rule,
//! each recording its errors in the [`Errors`] accumulator in the words of its [`Flavor`].

use syn::punctuated::Punctuated;
use syn::{Attribute, Fields, GenericParam, Generics, Ident, Path};

use crate::errors::Errors;
use crate::flavor::Flavor;

/// The state struct has no generic parameters and no lifetimes.
///
/// Every state type is stored under one name and must own its state, so a generic or
/// borrowing struct has no meaning as durable state.
pub(crate) fn struct_generics(
    generics: &Generics,
    state: &Ident,
    flavor: Flavor,
    errors: &mut Errors,
) -> bool {
    let Flavor {
        noun, stored_under, ..
    } = flavor;
    let mut ok = true;
    if !generics.params.is_empty() {
        ok = false;
        let lifetimes_only = generics
            .params
            .iter()
            .all(|param| matches!(param, GenericParam::Lifetime(_)));
        if lifetimes_only {
            errors.spanned(
                generics,
                format!(
                    "the state of a durable {noun} is owned data: remove the lifetime parameters of `{state}` and store owned values (`String` rather than `&'a str`)"
                ),
            );
        } else {
            errors.spanned(
                generics,
                format!(
                    "a durable {noun} cannot be generic ({stored_under}): remove the parameters of `{state}` and use concrete field types"
                ),
            );
        }
    }
    if let Some(clause) = &generics.where_clause {
        ok = false;
        errors.spanned(
            clause,
            format!("remove the `where` clause: a durable {noun} has no parameters to bound"),
        );
    }
    ok
}

/// The state struct has named fields (or none at all).
///
/// Fields are stored by name, so that a field added later takes its default and a field
/// removed later is ignored; a tuple struct has no names to store.
pub(crate) fn struct_shape(
    fields: &Fields,
    state: &Ident,
    flavor: Flavor,
    errors: &mut Errors,
) -> bool {
    match fields {
        Fields::Unnamed(unnamed) => {
            errors.spanned(
                unnamed,
                format!(
                    "the state of a durable {} needs named fields, which are stored by name: write `struct {state} {{ name: Type, .. }}`",
                    flavor.noun
                ),
            );
            false
        }
        Fields::Named(_) | Fields::Unit => true,
    }
}

/// The struct does not derive what the macro implements itself: `Default` (built from the
/// field defaults), `Serialize` and `Deserialize`.
///
/// Returns the struct's attributes with those derives removed, so that the error does not
/// come back as "conflicting implementations".
pub(crate) fn derives(attrs: &[Attribute], flavor: Flavor, errors: &mut Errors) -> Vec<Attribute> {
    let attribute = flavor.attribute;
    let mut kept = Vec::with_capacity(attrs.len());
    for attr in attrs {
        if !attr.path().is_ident("derive") {
            kept.push(attr.clone());
            continue;
        }
        let Ok(paths) = attr.parse_args_with(Punctuated::<Path, syn::Token![,]>::parse_terminated)
        else {
            kept.push(attr.clone());
            continue;
        };
        let mut rest = Vec::new();
        for path in paths {
            let last = path.segments.last().map(|s| s.ident.to_string());
            match last.as_deref() {
                Some("Default") => errors.spanned(
                    &path,
                    format!(
                        "`#[{attribute}]` implements `Default` from the fields' defaults: remove `Default` from this derive and give defaults with `#[field(default = ..)]`"
                    ),
                ),
                Some(trait_ @ ("Serialize" | "Deserialize")) => errors.spanned(
                    &path,
                    format!(
                        "`#[{attribute}]` already derives `{trait_}` (with the runtime's serde): remove it from this derive"
                    ),
                ),
                _ => rest.push(path),
            }
        }
        if !rest.is_empty() {
            kept.push(syn::parse_quote!(#[derive(#(#rest),*)]));
        }
    }
    kept
}
