//! The static description of an object type: `DurableObject::FIELDS` on the struct half,
//! `Handlers::HANDLER_SIGNATURES` and `Handlers::ALARM_NAMES` on the impl half. Types are
//! written as in the source (with `Self` replaced by the object's name), spaced as a person
//! would write them.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::{Attribute, Expr, ExprLit, Lit, Meta, Type};

use super::{error_type, replace_self};
use crate::model::{Access, Handler, HandlerSet, Output};
use crate::state_half::model::{Shape, StateStruct};

/// `const FIELDS` of the `DurableObject` impl.
pub(super) fn fields(state: &StateStruct, private: &TokenStream) -> TokenStream {
    let fields = match &state.shape {
        Shape::Named(fields) => fields.as_slice(),
        Shape::Unit => &[],
    };
    let ident = &state.ident;
    let state_ty: Type = syn::parse_quote!(#ident);
    let entries = fields.iter().map(|field| {
        let name = field.ident.unraw().to_string();
        let ty = type_text(&replace_self(&field.ty, &state_ty).to_token_stream());
        quote!(#private::FieldSignature::new(#name, #ty))
    });
    quote! {
        const FIELDS: &'static [#private::FieldSignature] = &[#(#entries),*];
    }
}

/// `const HANDLER_SIGNATURES` and `const ALARM_NAMES` of the `Handlers` impl.
pub(super) fn handlers(set: &HandlerSet, private: &TokenStream) -> TokenStream {
    let handlers = set
        .handlers
        .iter()
        .filter(|handler| !handler.stub)
        .map(|handler| signature(set, handler, private));
    let alarms = set.alarms.iter().map(|alarm| {
        let cfgs = &alarm.cfgs;
        let name = &alarm.name;
        quote!(#(#cfgs)* #name)
    });
    quote! {
        const HANDLER_SIGNATURES: &'static [#private::HandlerSignature] = &[#(#handlers),*];
        const ALARM_NAMES: &'static [&'static ::core::primitive::str] = &[#(#alarms),*];
    }
}

fn signature(set: &HandlerSet, handler: &Handler, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let name = handler.client.unraw().to_string();
    let access = match handler.access {
        Access::Read => quote!(#private::Access::Read),
        Access::Write => quote!(#private::Access::Write),
    };
    let arguments = handler.args.iter().map(|argument| {
        let name = argument.ident.unraw().to_string();
        let ty = type_text(&replace_self(&argument.ty, self_ty).to_token_stream());
        quote!(#private::ArgumentSignature::new(#name, #ty))
    });
    let text = |ty: &Type| type_text(&replace_self(ty, self_ty).to_token_stream());
    let (output, error) = match &handler.output {
        Output::Unit => ("()".to_owned(), quote!(::core::option::Option::None)),
        Output::Value(ty) => (text(ty), quote!(::core::option::Option::None)),
        Output::Fallible { ok, err } => {
            let err = type_text(&error_type(err, self_ty, private));
            (text(ok), quote!(::core::option::Option::Some(#err)))
        }
    };
    let is_async = handler.is_async;
    let exposed = set.expose && !handler.internal;
    let doc = doc_text(&handler.docs);
    let cfgs = &handler.cfgs;
    quote! {
        #(#cfgs)*
        #private::HandlerSignature::new(
            #name,
            #access,
            &[#(#arguments),*],
            #output,
            #error,
            #is_async,
            #exposed,
            #doc,
        )
    }
}

/// The text of `#[doc = ".."]` attributes, one line each, trimmed.
fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(doc) if doc.path.is_ident("doc") => match &doc.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(text),
                    ..
                }) => Some(text.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join("\n").trim().to_owned()
}

/// Tokens as a person writes them: `Vec<String>`, `HashMap<String, u64>`, `&'static str`.
fn type_text(tokens: &TokenStream) -> String {
    let printed = tokens.to_string();
    let mut out = String::with_capacity(printed.len());
    for part in printed.split(' ').filter(|part| !part.is_empty()) {
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
        let spaced = match (out.chars().last(), part.chars().next()) {
            (Some(',' | ';'), _) => true,
            (Some(left), Some(right)) => word(left) && word(right),
            _ => false,
        };
        if spaced {
            out.push(' ');
        }
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::type_text;
    use quote::quote;

    #[test]
    fn types_read_as_written() {
        let cases = [
            (quote!(Vec<String>), "Vec<String>"),
            (
                quote!(std::collections::HashMap<String, u64>),
                "std::collections::HashMap<String, u64>",
            ),
            (quote!(&'static str), "&'static str"),
            (quote!([u8; 4]), "[u8; 4]"),
            (quote!(Option<(u32, bool)>), "Option<(u32, bool)>"),
            (quote!(&mut dyn Send), "&mut dyn Send"),
        ];
        for (tokens, text) in cases {
            assert_eq!(type_text(&tokens), text);
        }
    }
}
