// app.js: the gpuvm portal's entry, in Preact with htm's tagged templates
// (no build step). It loads the module of the page the shell names (its
// <body data-page>, pages/NAME.js, whose default export is the page's
// component) and renders it with the caller's session.
import {html, render} from './vendor/preact-htm.js';
import * as api from './api.js';
import {Header, Problem, page} from './ui.js';
import {setContact} from './i18n.js';

async function main() {
  const root = document.getElementById('app');
  let session = null;
  try {
    if (page !== 'login') session = await api.session();
    if (session) setContact(session.contact);
    const {default: Page} = await import('./pages/' + page + '.js');
    render(html`<${Page} session=${session} />`, root);
  } catch (err) {
    render(html`<${Header} session=${session} /><main id="main"><${Problem} error=${err} /></main>`, root);
  }
}

main();
