//! The struct half: the state struct with serde's derives, `Default` from the field defaults,
//! `DurableObject` (type name and options), and a storability check on every field type.

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{LitStr, Type};

use super::{replace_self, wrap_in_const};
use crate::model::{Object, Options, Shape, StateField};

/// Everything the struct half generates but its handle type.
pub(super) fn expand(object: &Object) -> TokenStream {
    let Object {
        root,
        attrs,
        vis,
        ident,
        type_name,
        options,
        shape,
    } = object;
    let private = root.private();
    let serde_crate = root.serde_crate();
    let object_ty: Type = syn::parse_quote!(#ident);

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
                let ty = replace_self(&field.ty, &object_ty);
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

    let type_name = LitStr::new(type_name, ident.span());
    let options = options_expr(options, &private);
    let hidden = wrap_in_const(quote! {
        #[automatically_derived]
        impl ::core::default::Default for #ident {
            fn default() -> Self {
                #default_body
            }
        }

        #[automatically_derived]
        impl #private::DurableObject for #ident {
            const TYPE_NAME: &'static ::core::primitive::str = #type_name;

            fn options() -> #private::ObjectOptions {
                #options
            }
        }

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

/// The `ObjectOptions` value built with the runtime's const builder.
fn options_expr(options: &Options, private: &TokenStream) -> TokenStream {
    let Options {
        hibernate_after,
        shutdown_after,
        call_timeout,
        queue_capacity,
    } = options;
    let duration = |name: &str, nanos: &Option<u64>| {
        nanos.map(|nanos| {
            let method = quote::format_ident!("with_{}", name);
            let nanos = Literal::u64_unsuffixed(nanos);
            quote!(.#method(#private::nanos(#nanos)))
        })
    };
    let hibernate_after = duration("hibernate_after", hibernate_after);
    let shutdown_after = duration("shutdown_after", shutdown_after);
    let call_timeout = duration("call_timeout", call_timeout);
    let queue_capacity = queue_capacity.map(|capacity| {
        let capacity = Literal::usize_unsuffixed(capacity);
        quote!(.with_queue_capacity(#capacity))
    });
    quote! {
        #private::options() #hibernate_after #shutdown_after #call_timeout #queue_capacity
    }
}
