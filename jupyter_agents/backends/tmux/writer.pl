#!/usr/bin/perl
# The transcript writer of a tmux session (jupyter_agents.backends.tmux.writer), run by
# ``pipe-pane -O`` with the pane's output on stdin:
#
#     perl writer.pl DIR SEGMENT_BYTES KEEP
#
# It writes the layout of jupyter_agents/segments.py, timing index included, as the
# broker's recorder (backends/broker/recorder.py) does. It appends to the newest
# segment in DIR (continuing an earlier run's) and rolls to a new one every
# SEGMENT_BYTES, deleting the oldest beyond KEEP (with their indexes, and the gap
# markers before the first kept byte), or earlier when its index is full. Index
# entries follow segments.py's rules: INDEX_INTERVAL (100 ms) between entries, an
# index at most 1/INDEX_SHARE (1/8) of its segment. A failed write (a full disk) loses
# that read's output and leaves one empty gap-<offset>-<unixtime> marker per episode;
# every later read tries again, so the pane never blocks and tmux never buffers a
# flood. It ends when the pipe ends.
#
# Perl because POSIX sh cannot tell the time below a second and one process per
# session is the cost wanted (perl-base is Essential on Debian; Time::HiRes, of the
# perl package, gives milliseconds, else the index has whole seconds).
use strict;
use warnings;
BEGIN { eval { require Time::HiRes; Time::HiRes->import('time'); 1 } }
umask 077;
my ($dir, $seg, $keep) = @ARGV;
chdir $dir or die "transcript writer: cannot enter $dir: $!\n";
binmode STDIN;
sub starts {
    opendir(my $dh, '.') or return ();
    my @s = sort { $a <=> $b } map { /\A(0|[1-9][0-9]*)\.log\z/ ? $1 : () } readdir $dh;
    closedir $dh;
    return @s;
}
my @starts = starts();
@starts = (0) unless @starts;
my $start = $starts[-1];
my ($log, $idx);
sub open_segment {
    open($log, '>>', "$start.log") or die "transcript writer: $start.log: $!\n";
    binmode $log;
    $idx = undef unless open($idx, '>>', "$start.idx");
}
open_segment();
my $size = -s $log || 0;
my ($last_o, $last_ms, $isize, $failing) = (-1, 0, 0, 0);
sub roll {
    close $log;
    close $idx if $idx;
    $start += $size;
    ($size, $last_o, $isize) = (0, -1, 0);
    open_segment();
    push @starts, $start;
    while (@starts > $keep) {
        my $old = shift @starts;
        unlink "$old.log", "$old.idx";
    }
    opendir(my $dh, '.') or return;
    for (readdir $dh) {
        unlink $_ if /\Agap-([0-9]+)-[0-9]+\z/ && $1 < $starts[0];
    }
    closedir $dh;
}
sub stamp {
    my ($o, $ms) = ($start + $size, int($_[0] * 1000));
    return if !$idx || ($last_o >= 0 && $ms - $last_ms < 100);
    my $line = $last_o < 0 ? "$o $ms\n" : ($o - $last_o) . ' ' . ($ms - $last_ms) . "\n";
    my $w = syswrite($idx, $line);
    ($last_o, $last_ms, $isize) = ($o, $ms, $isize + $w) if $w;
}
my $buf;
while (1) {
    my $n = sysread(STDIN, $buf, 65536);
    if (!defined $n) { next if $!{EINTR}; last; }
    last if $n == 0;
    my $now = time;
    my $pos = 0;
    while ($pos < $n) {
        roll() if $size >= $seg || $isize >= $seg / 8;
        stamp($now);
        my $room = $seg - $size;
        my $w = syswrite($log, $buf, $n - $pos < $room ? $n - $pos : $room, $pos);
        if (!$w) {
            $size = -s "$start.log" || 0;
            if (!$failing) {
                $failing = 1;
                my $gap = $start + $size;
                if (open(my $g, '>', sprintf('gap-%d-%d', $gap, $now))) { close $g }
            }
            last;
        }
        $failing = 0;
        $pos += $w;
        $size += $w;
    }
}
