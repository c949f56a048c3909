// Package wire is the authority channel between a gateway process and the
// root side: one envelope for every broker ({id, broker, op, body} and
// {id, error{kind, message}, body}), one table of the closed set of
// refusal kinds mapped to errors both ways, and the client a gateway
// process speaks it with.
//
// Plane: any. The unprivileged gateway process imports it (Client) and
// the root side does (the envelope and the error table); it carries no
// authority itself. It must never import the store or policy, and never
// let a message name a broker other than the one its connection is bound
// to without the root side checking it.
package wire
