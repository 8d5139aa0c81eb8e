//! The argument lists of both macros' attributes, read alike: a darling receiver per list,
//! every error recorded, and `crate = ".."` kept after other options failed so that the
//! generated code still resolves and errors do not cascade. The impl half also says where the
//! struct half's options belong when they are given to it.

use darling::ast::NestedMeta;
use darling::{Error, FromMeta};
use proc_macro2::TokenStream;
use syn::Meta;

use crate::errors::Errors;
use crate::flavor::Flavor;

/// Parses the struct attribute's arguments into `T`. Every error goes to `errors`; after a
/// receiver error, the result is `with_crate` of the `crate = ..` option (when it is valid).
pub(crate) fn parse_struct<T: FromMeta + Default>(
    args: TokenStream,
    errors: &mut Errors,
    with_crate: impl FnOnce(Option<syn::Path>) -> T,
) -> T {
    let Some(items) = errors.handle(NestedMeta::parse_meta_list(args).map_err(Error::from)) else {
        return T::default();
    };
    from_list(&items, errors, with_crate)
}

/// Parses the impl attribute's arguments into `T` as [`parse_struct`] does, after reporting
/// (and leaving out) each of `struct_options`, which belong to the struct's attribute.
pub(crate) fn parse_impl<T: FromMeta + Default>(
    args: TokenStream,
    struct_options: &[&str],
    flavor: Flavor,
    errors: &mut Errors,
    with_crate: impl FnOnce(Option<syn::Path>) -> T,
) -> T {
    let Some(items) = errors.handle(NestedMeta::parse_meta_list(args).map_err(Error::from)) else {
        return T::default();
    };
    let (misplaced, rest): (Vec<_>, Vec<_>) = items.into_iter().partition(|item| {
        option_path(item).is_some_and(|path| struct_options.iter().any(|name| path.is_ident(name)))
    });
    for item in &misplaced {
        let name = option_path(item)
            .and_then(syn::Path::get_ident)
            .map(ToString::to_string);
        errors.spanned(
            item,
            format!(
                "`{}` is an option of {}: write it in the struct's `#[{}(..)]`",
                name.unwrap_or_default(),
                flavor.state_struct,
                flavor.attribute
            ),
        );
    }
    from_list(&rest, errors, with_crate)
}

/// The name of the option `item` gives, if it gives one (even with a value that is not an
/// expression).
fn option_path(item: &NestedMeta) -> Option<&syn::Path> {
    match item {
        NestedMeta::Meta(meta) => Some(meta.path()),
        NestedMeta::NameValueInvalidExpr(meta) => Some(&meta.path),
        NestedMeta::Lit(_) => None,
    }
}

/// `T` from `items`, or `with_crate` of the `crate = ..` option after recording the error.
fn from_list<T: FromMeta>(
    items: &[NestedMeta],
    errors: &mut Errors,
    with_crate: impl FnOnce(Option<syn::Path>) -> T,
) -> T {
    match T::from_list(items) {
        Ok(args) => args,
        Err(error) => {
            errors.push(error);
            with_crate(crate_option(items))
        }
    }
}

/// The value of `crate = ".."` among `items`, if it parses, for best-effort codegen after
/// other options failed.
fn crate_option(items: &[NestedMeta]) -> Option<syn::Path> {
    items.iter().find_map(|item| match item {
        NestedMeta::Meta(Meta::NameValue(nv)) if nv.path.is_ident("crate") => {
            syn::Path::from_expr(&nv.value).ok()
        }
        _ => None,
    })
}
