// Package paypaloauth fetches and caches PayPal OAuth2 client-credentials
// access tokens, for the webhook verifier's postback mode and the
// resolver's PayPal lookups.
//
// One Source holds one token. It is renewed a minute before PayPal says it
// expires (halfway, for a token that lives two minutes or less), so no call
// starts with a token that dies in flight, and by one caller at a time: a
// burst of callers that find no token wait for that one fetch, and each can
// give up when its context ends. A caller whose token PayPal refused (401)
// drops it with Invalidate.
//
// The client secret travels only in the Authorization header of the token
// request. No error carries a response body (a refusal may echo the
// credentials) or the request URL.
package paypaloauth
