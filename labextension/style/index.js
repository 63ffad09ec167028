import 'asciinema-player/dist/bundle/asciinema-player.css';
import './base.css';
