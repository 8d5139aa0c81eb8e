//! The impl block, as far as both macros read it alike: its shape (an inherent impl of a
//! plain type path) and the helper attributes on its items, stripped and grouped per item.
//! Each macro's own rules for the marked methods stay in its `validate` module.

use syn::{Attribute, Ident, ImplItem, ItemImpl, Type};

use crate::errors::Errors;
use crate::flavor::Flavor;

/// A macro's set of helper attributes (`#[handler]`, `#[step]`, ..).
pub(crate) trait HelperAttr: Copy + PartialEq {
    /// Which helper `attr` is, matched by the last segment of its path so that
    /// `#[durable_runtime::handler]` is recognised too.
    fn of(attr: &Attribute) -> Option<Self>;

    /// The attribute's name, for messages.
    fn name(self) -> &'static str;

    /// The message for a method that carries two different helpers.
    const MIXED: &'static str;
}

/// What the helper attributes of one impl item say.
pub(crate) struct Marked<H> {
    /// Index of the item in the impl block.
    pub(crate) index: usize,
    /// The helper attributes it carried, never none.
    pub(crate) helpers: Vec<(H, Attribute)>,
}

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

/// Removes the helper attributes from every item of the impl block, saying which items
/// carried them.
pub(crate) fn strip_helpers<H: HelperAttr>(item: &mut ItemImpl) -> Vec<Marked<H>> {
    let mut marked = Vec::new();
    for (index, impl_item) in item.items.iter_mut().enumerate() {
        let attrs = match impl_item {
            ImplItem::Fn(f) => &mut f.attrs,
            ImplItem::Const(c) => &mut c.attrs,
            ImplItem::Type(t) => &mut t.attrs,
            ImplItem::Macro(m) => &mut m.attrs,
            _ => continue,
        };
        let mut helpers = Vec::new();
        attrs.retain(|attr| match H::of(attr) {
            Some(helper) => {
                helpers.push((helper, attr.clone()));
                false
            }
            None => true,
        });
        if !helpers.is_empty() {
            marked.push(Marked { index, helpers });
        }
    }
    marked
}

/// A method carries one helper, once. Returns it with its attribute, or `None` when the
/// method carries different ones.
pub(crate) fn one_helper<'a, H: HelperAttr>(
    helpers: &'a [(H, Attribute)],
    errors: &mut Errors,
) -> Option<(H, &'a Attribute)> {
    let (first, first_attr) = &helpers[0];
    let mut result = Some((*first, first_attr));
    for (helper, attr) in &helpers[1..] {
        if helper == first {
            errors.spanned(
                attr,
                format!("duplicate `#[{}]`: remove this one", helper.name()),
            );
        } else {
            result = None;
            errors.spanned(attr, H::MIXED);
        }
    }
    result
}

/// The item at `index` when it is a method; otherwise says that `helper` goes on one.
pub(crate) fn marked_method<'a, H: HelperAttr>(
    item: &'a ItemImpl,
    marked: &Marked<H>,
    errors: &mut Errors,
) -> Option<&'a syn::ImplItemFn> {
    match &item.items[marked.index] {
        ImplItem::Fn(method) => Some(method),
        _ => {
            let (helper, attr) = &marked.helpers[0];
            errors.spanned(
                attr,
                format!("`#[{}]` goes on a method of the impl block", helper.name()),
            );
            None
        }
    }
}
