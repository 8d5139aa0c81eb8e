//! The impl block as a whole: its shape (an inherent impl of a plain type path) and the names
//! of its items, which generated items must not take.

use std::collections::HashMap;

use syn::ext::IdentExt;
use syn::{Ident, ImplItem, ItemImpl, Type};

use crate::errors::Errors;
use crate::flavor::Flavor;

/// The impl half is an inherent, non-generic impl of a plain type path (`impl Counter`).
/// Returns the type's name.
pub(crate) fn impl_shape(item: &ItemImpl, flavor: Flavor, errors: &mut Errors) -> Option<Ident> {
    let Flavor {
        attribute,
        noun,
        example,
        impl_target,
        ..
    } = flavor;
    let mut ok = true;
    if let Some((path, _)) = &item.trait_ {
        ok = false;
        errors.spanned(
            path,
            format!(
                "`#[{attribute}]` goes on the {noun}'s inherent impl block (`impl {example} {{ .. }}`), not on a trait impl"
            ),
        );
    }
    if !item.generics.params.is_empty() {
        ok = false;
        errors.spanned(
            &item.generics,
            format!("a durable {noun} cannot be generic: remove the parameters of this impl block"),
        );
    }
    let name = match &*item.self_ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .filter(|last| last.arguments.is_none())
            .map(|last| last.ident.clone()),
        _ => None,
    };
    if name.is_none() {
        errors.spanned(
            &item.self_ty,
            format!(
                "`#[{attribute}]` goes on the impl block of {impl_target}: `impl {example} {{ .. }}`"
            ),
        );
    }
    name.filter(|_| ok)
}

/// The functions and constants of an impl block by name (the value namespace generated items
/// share).
pub(crate) fn value_items(item: &ItemImpl) -> HashMap<String, &Ident> {
    let mut items = HashMap::new();
    for impl_item in &item.items {
        let ident = match impl_item {
            ImplItem::Fn(method) => &method.sig.ident,
            ImplItem::Const(constant) => &constant.ident,
            _ => continue,
        };
        items.entry(ident.unraw().to_string()).or_insert(ident);
    }
    items
}
