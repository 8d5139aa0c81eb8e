//! The helper attributes of the impl block's items (`#[handler]`, `#[step]`, ..): which
//! macro's set they belong to, stripped from the items and grouped per item.

use syn::{Attribute, ImplItem, ItemImpl};

use crate::errors::Errors;

/// A macro's set of helper attributes (`#[handler]`, `#[step]`, ..).
pub(crate) trait HelperAttr: Copy + PartialEq {
    /// Which helper `attr` is, matched by the last segment of its path so that
    /// `#[durable_runtime::handler]` is recognised too.
    fn of(attr: &Attribute) -> Option<Self>;

    /// The attribute's name, for messages.
    fn name(self) -> &'static str;

    /// What a method with this helper is called in messages: "a handler", "a step".
    fn what(self) -> &'static str;

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
