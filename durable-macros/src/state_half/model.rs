//! The IR of the state struct, shared by both macros: a [`StateStruct`] of [`StateField`]s read
//! with their `#[field(..)]` attributes, built under the rules of [`super::validate`].

use darling::FromField;
use syn::ext::IdentExt;
use syn::{Attribute, Expr, Fields, Ident, ItemStruct, Type, Visibility};

use super::validate;
use crate::attrs::{self, FieldAttrs, TypeNameArg};
use crate::errors::Errors;
use crate::flavor::Flavor;

/// The state struct without the macro's own options.
pub(crate) struct StateStruct {
    /// The struct's own attributes, to re-emit (doc comments, derives, `#[serde(..)]`).
    pub(crate) attrs: Vec<Attribute>,
    /// The struct's visibility.
    pub(crate) vis: Visibility,
    /// The struct's name.
    pub(crate) ident: Ident,
    /// The stored name: `name = ".."`, or the struct's name.
    pub(crate) name: String,
    /// The fields.
    pub(crate) shape: Shape,
}

/// The form of the state struct.
pub(crate) enum Shape {
    /// `struct S { .. }`, possibly empty.
    Named(Vec<StateField>),
    /// `struct S;`
    Unit,
}

/// One field of the state.
pub(crate) struct StateField {
    /// Its attributes minus `#[field(..)]`.
    pub(crate) attrs: Vec<Attribute>,
    /// Its visibility.
    pub(crate) vis: Visibility,
    /// Its name.
    pub(crate) ident: Ident,
    /// Its type.
    pub(crate) ty: Type,
    /// `#[field(default = <expr>)]`; `None` takes `Default::default()`.
    pub(crate) default: Option<Expr>,
}

impl StateStruct {
    /// Reads the struct, with `name` the stored name it declares. `None` when the struct
    /// cannot be durable state at all (tuple struct, generics); the errors say why.
    pub(crate) fn from_ast(
        item: &ItemStruct,
        name: Option<TypeNameArg>,
        flavor: Flavor,
        errors: &mut Errors,
    ) -> Option<Self> {
        let generics_ok = validate::struct_generics(&item.generics, &item.ident, flavor, errors);
        let shape_ok = validate::struct_shape(&item.fields, &item.ident, flavor, errors);
        let attrs = validate::derives(&item.attrs, flavor, errors);
        let shape = match &item.fields {
            Fields::Named(named) => Some(Shape::Named(
                named
                    .named
                    .iter()
                    .filter_map(|field| StateField::from_ast(field, errors))
                    .collect(),
            )),
            Fields::Unit => Some(Shape::Unit),
            Fields::Unnamed(_) => None,
        };
        if !(generics_ok && shape_ok) {
            return None;
        }
        Some(Self {
            attrs,
            vis: item.vis.clone(),
            ident: item.ident.clone(),
            name: name.map_or_else(|| item.ident.unraw().to_string(), |name| name.0),
            shape: shape?,
        })
    }
}

impl StateField {
    /// Reads one named field and its `#[field(..)]` attributes. Always yields a field (with
    /// no default when its attribute is bad), so that codegen can go on.
    fn from_ast(field: &syn::Field, errors: &mut Errors) -> Option<Self> {
        let parsed = errors.handle(FieldAttrs::from_field(field));
        Some(Self {
            attrs: field
                .attrs
                .iter()
                .filter(|attr| !attr.path().is_ident(attrs::FIELD))
                .cloned()
                .collect(),
            vis: field.vis.clone(),
            ident: field.ident.clone()?,
            ty: field.ty.clone(),
            default: parsed.and_then(|attrs| attrs.default).map(|d| d.0),
        })
    }
}

/// A struct with every `#[field(..)]` removed, for the fallback expansion.
pub(crate) fn strip_field_attrs(item: &ItemStruct) -> ItemStruct {
    let mut item = item.clone();
    for field in item.fields.iter_mut() {
        field
            .attrs
            .retain(|attr| !attr.path().is_ident(attrs::FIELD));
    }
    item
}
