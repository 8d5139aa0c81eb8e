//! Code generation of the state struct, shared by both macros: the struct with serde's
//! derives, `Default` from the field defaults, a storability check on every field type, and
//! the macro's own trait impl next to them.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Type;
use syn::spanned::Spanned;

use super::model::{Shape, StateField, StateStruct};
use crate::codegen::{replace_self, wrap_in_const};
use crate::paths::Root;

/// The struct and its hidden items; `trait_impl` (the macro's own trait, `DurableObject` or
/// `FsmState`) joins them in the anonymous constant.
pub(crate) fn expand(state: &StateStruct, root: &Root, trait_impl: TokenStream) -> TokenStream {
    let StateStruct {
        attrs,
        vis,
        ident,
        shape,
        ..
    } = state;
    let private = root.private();
    let serde_crate = root.serde_crate();
    let state_ty: Type = syn::parse_quote!(#ident);

    let (body, serde_attr, default_body, checks) = match shape {
        Shape::Named(fields) => {
            let definitions = fields.iter().map(|field| {
                let StateField {
                    attrs,
                    vis,
                    ident,
                    ty,
                    ..
                } = field;
                quote!(#(#attrs)* #vis #ident: #ty)
            });
            let initializers = fields.iter().map(|field| initializer(field, &private));
            let checks = fields.iter().map(|field| {
                let ty = replace_self(&field.ty, &state_ty);
                quote_spanned!(field.ty.span()=> #private::assert_stored::<#ty>();)
            });
            (
                quote!({ #(#definitions,)* }),
                quote!(#[serde(crate = #serde_crate, default)]),
                quote!(Self { #(#initializers,)* }),
                quote!(#(#checks)*),
            )
        }
        Shape::Unit => (
            quote!(;),
            quote!(#[serde(crate = #serde_crate)]),
            quote!(Self),
            TokenStream::new(),
        ),
    };

    let hidden = wrap_in_const(quote! {
        #[automatically_derived]
        impl ::core::default::Default for #ident {
            fn default() -> Self {
                #default_body
            }
        }

        #trait_impl

        #checks
    });

    // serde's derives come first, so that `#[serde(..)]` attributes of the user's are not
    // "used before introduced".
    quote! {
        #[derive(#private::serde::Serialize, #private::serde::Deserialize)]
        #serde_attr
        #(#attrs)*
        #vis struct #ident #body

        #hidden
    }
}

/// `field: <default>` in `Default::default`: the user's expression, or the type's default
/// through `FieldDefault`, spanned at the type so that a type without a default is reported
/// on it.
fn initializer(field: &StateField, private: &TokenStream) -> TokenStream {
    let StateField {
        ident, ty, default, ..
    } = field;
    match default {
        Some(expr) => quote!(#ident: #expr),
        None => quote_spanned! {ty.span()=>
            #ident: <#ty as #private::FieldDefault>::field_default()
        },
    }
}
